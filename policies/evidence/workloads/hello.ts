// TypeScript through esbuild (moat's typescript language) for the seccomp
// evidence: types, a class, async code, node modules. Prints "ok".
import { readFileSync, writeFileSync } from 'node:fs';
import { createHash } from 'node:crypto';

interface Item { name: string; n: number }
class Bag<T extends Item> {
  private items: T[] = [];
  add(i: T): this { this.items.push(i); return this; }
  total(): number { return this.items.reduce((s, i) => s + i.n, 0); }
}
enum Color { Red, Green }
async function main(): Promise<void> {
  const b = new Bag<Item>().add({ name: 'a', n: 2 }).add({ name: 'b', n: 3 });
  if (b.total() !== 5 || Color.Green !== 1) throw new Error('types');
  writeFileSync('/tmp/t.json', JSON.stringify({ h: createHash('sha1').update('x').digest('hex') }));
  const v: { h: string } = JSON.parse(readFileSync('/tmp/t.json', 'utf8'));
  await new Promise<void>((r) => setTimeout(r, 5));
  console.log(v.h.length === 40 ? 'ok' : 'bad');
}
main();
