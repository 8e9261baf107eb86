// node --test reporter printing one result line per top-level test
// ("@@wl ok|fail|skip node.NAME[: why]"; README.md)
export default async function* reporter(source) {
  for await (const ev of source) {
    if (ev.type !== 'test:pass' && ev.type !== 'test:fail') continue;
    const d = ev.data;
    if (d.nesting !== 0 || d.details?.type === 'suite') continue;
    const name = 'node.' + d.name.replace(/\s+/g, '_');
    if (d.skip !== undefined || d.todo !== undefined) {
      yield `\n@@wl skip ${name}: ${d.skip ?? d.todo ?? ''}\n`;
    } else if (ev.type === 'test:pass') {
      yield `\n@@wl ok ${name}\n`;
    } else {
      const err = d.details?.error;
      const why = String(err?.cause?.message ?? err?.message ?? err).split('\n').join(' ').slice(0, 300);
      yield `\n@@wl fail ${name}: ${why}\n`;
    }
  }
}
