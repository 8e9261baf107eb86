'use strict';
// moat mcp (clients/node/mcp.js, docs/MCP.md) driven by the official SDK's own Client over
// stdio, spawning the built `moat mcp` as an MCP host would. Run by tests/mcp/run.sh: once
// as root, once as uid 65534 (MOAT_MCP_MODE says which). Without the SDK installed
// (`npm ci` in clients/node) every case reports itself skipped.
const test = require('node:test');
const assert = require('node:assert/strict');
const { spawn, spawnSync } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { createRequire } = require('node:module');

const ROOT = path.resolve(__dirname, '../..');
const MOAT = process.env.MOAT_BIN || path.join(ROOT, 'build/moat');
const MODE = process.env.MOAT_MCP_MODE || (process.getuid() === 0 ? 'root' : 'rootless');
let sdk = null;
let skip = false;
try {
  const req = createRequire(path.join(ROOT, 'clients/node/package.json'));
  sdk = {
    Client: req('@modelcontextprotocol/sdk/client/index.js').Client,
    StdioClientTransport: req('@modelcontextprotocol/sdk/client/stdio.js').StdioClientTransport,
  };
} catch (e) {
  skip = `the MCP SDK is not installed (npm ci in clients/node): ${e.code || e.message}`;
}
if (!skip && MODE === 'root' && process.getuid() !== 0) skip = 'root mode needs root';
if (!skip && !fs.existsSync(MOAT)) throw new Error(`moat binary not found at ${MOAT}; build it or set MOAT_BIN`);
const T = (name, opts, fn) => test(`[${MODE}] ${name}`, { skip, ...opts }, fn);

// A connected SDK client of `moat mcp ARGS...`; its stderr (the server's log) is kept.
async function connect(args = [], env = {}) {
  const transport = new sdk.StdioClientTransport({
    command: MOAT, args: ['mcp', ...args], stderr: 'pipe',
    env: { PATH: process.env.PATH, HOME: process.env.HOME || '/nonexistent', ...env },
  });
  const log = [];
  transport.stderr.on('data', (d) => log.push(d));
  const client = new sdk.Client({ name: 'moat-test', version: '0' });
  const errors = [];
  client.onerror = (e) => errors.push(e);
  await client.connect(transport);
  return {
    client, transport, errors, log: () => Buffer.concat(log).toString('utf8'),
    call: (args2, timeout = 120000) => client.callTool({ name: 'run_code', arguments: args2 },
      undefined, { timeout }),
    close: () => client.close(),
  };
}

const text = (r) => r.content.filter((c) => c.type === 'text').map((c) => c.text).join('\n');

// pid → ppid for every process, and the descendants of one.
function descendants(pid) {
  const parent = new Map();
  for (const d of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(d)) continue;
    try {
      const stat = fs.readFileSync(`/proc/${d}/stat`, 'utf8');
      parent.set(Number(d), Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]));
    } catch { /* gone */ }
  }
  const out = [];
  let frontier = [pid];
  while (frontier.length) {
    const next = [];
    for (const [p, pp] of parent) if (frontier.includes(pp)) { out.push(p); next.push(p); }
    frontier = next;
  }
  return out;
}

// moat's cgroup leaves (moat-<pid>-...) where a run of a process in pid's cgroups puts
// them: its own cgroup per v1 controller and in the unified hierarchy.
function leafDirs(pid) {
  const dirs = [];
  for (const line of fs.readFileSync(`/proc/${pid}/cgroup`, 'utf8').split('\n')) {
    const m = /^\d+:([^:]*):(.*)$/.exec(line);
    if (!m) continue;
    if (m[1] === '') dirs.push(`/sys/fs/cgroup/unified${m[2]}`, `/sys/fs/cgroup${m[2]}`);
    for (const c of m[1].split(',')) if (c) dirs.push(`/sys/fs/cgroup/${c}${m[2]}`, `/sys/fs/cgroup/${m[1]}${m[2]}`);
  }
  return [...new Set(dirs)].filter((d) => { try { return fs.statSync(d).isDirectory(); } catch { return false; } });
}
const alive = (pid) => { try { process.kill(pid, 0); return true; } catch (e) { return e.code === 'EPERM'; } };
function leaves(dirs) {
  const out = new Set();
  for (const d of dirs) {
    let names = [];
    try { names = fs.readdirSync(d); } catch { continue; }
    for (const n of names) if (/^moat-\d+-/.test(n)) out.add(`${d}/${n}`);
  }
  return out;
}

T('tools_list: one tool, run_code; the model may give language, code, stdin, files and nothing else', {}, async () => {
  const s = await connect();
  try {
    const { tools } = await s.client.listTools();
    assert.deepEqual(tools.map((t) => t.name), ['run_code']);
    const t = tools[0];
    assert.deepEqual(Object.keys(t.inputSchema.properties).sort(), ['code', 'files', 'language', 'stdin']);
    assert.deepEqual([...t.inputSchema.required].sort(), ['code', 'language']);
    assert.equal(t.inputSchema.additionalProperties, false);
    assert.deepEqual(t.inputSchema.properties.language.enum, ['python', 'javascript', 'typescript', 'bash', 'sh']);
    const schema = JSON.stringify(t.inputSchema);
    for (const k of ['timeout', 'memoryMb', 'cpus', 'pidsLimit', 'network', 'allowedHosts', 'kvEnabled',
      'sandboxId', 'env', 'maxOutputBytes']) {
      assert.ok(!schema.includes(`"${k}"`), `the input schema names ${k}`);
    }
    assert.equal(t.outputSchema.type, 'object');
    for (const k of ['stdout', 'stderr', 'exitCode', 'timedOut', 'sandbox']) assert.ok(t.outputSchema.properties[k], k);
    assert.match(t.description, /no network access/);
  } finally { await s.close(); }
});

T('languages: run_code in python, javascript, typescript, bash and sh, with stdin and files', {}, async () => {
  const s = await connect();
  try {
    const cases = [
      ['python', 'import sys\nprint(open("data/in.txt").read().strip(), sys.stdin.read().strip(), 6*7)'],
      ['javascript', 'const fs = require("fs");\nconsole.log(fs.readFileSync("data/in.txt", "utf8").trim(), fs.readFileSync(0, "utf8").trim(), 6*7)'],
      ['typescript', 'import * as fs from "fs";\nconst n: number = 6 * 7;\nconsole.log(fs.readFileSync("data/in.txt", "utf8").trim(), fs.readFileSync(0, "utf8").trim(), n)'],
      ['bash', 'read -r line; echo "$(cat data/in.txt) $line $((6*7))"'],
      ['sh', 'read -r line; echo "$(cat data/in.txt) $line $((6*7))"'],
    ];
    for (const [language, code] of cases) {
      const r = await s.call({ language, code, stdin: 'from-stdin\n', files: { 'data/in.txt': 'from-file\n' } });
      assert.ok(!r.isError, `${language}: ${text(r)}`);
      assert.equal(r.structuredContent.stdout, 'from-file from-stdin 42\n', `${language}: ${text(r)}`);
      assert.equal(r.structuredContent.exitCode, 0, language);
      assert.equal(r.structuredContent.timedOut, false, language);
      assert.match(text(r), /^exit code 0, \d+ ms\n--- stdout ---\nfrom-file from-stdin 42\n/, language);
    }
    // a program that fails is a result, not a tool error: the model reads its stderr
    const r = await s.call({ language: 'python', code: 'raise SystemExit("no luck")' });
    assert.ok(!r.isError);
    assert.equal(r.structuredContent.exitCode, 1);
    assert.match(r.structuredContent.stderr, /no luck/);
    assert.deepEqual(s.errors, []);
  } finally { await s.close(); }
});

T('timeout: a program past the operator\'s timeout is a tool error with its output so far', {}, async () => {
  const s = await connect(['--timeout', '1s']);
  try {
    const t0 = Date.now();
    const r = await s.call({ language: 'python', code: 'import time\nprint("started", flush=True)\nwhile True: time.sleep(0.05)' });
    assert.equal(r.isError, true);
    assert.equal(r.content[0].text, 'The program did not finish within its time limit of 1000 ms and was stopped; its output until then follows.');
    assert.equal(r.structuredContent.timedOut, true);
    assert.equal(r.structuredContent.exitCode, null);
    assert.equal(r.structuredContent.stdout, 'started\n');
    assert.equal(r.structuredContent.sandbox.timeoutMs, 1000);
    assert.ok(Date.now() - t0 < 15000, `took ${Date.now() - t0} ms`);
    // the server goes on
    const ok = await s.call({ language: 'bash', code: 'echo alive' });
    assert.equal(ok.structuredContent.stdout, 'alive\n');
  } finally { await s.close(); }
});

T('refused_input: an unknown language, an extra argument (network, memoryMb, timeout), a missing code', {}, async () => {
  const s = await connect();
  try {
    let r = await s.call({ language: 'cobol', code: 'DISPLAY "HI".' });
    assert.equal(r.isError, true);
    assert.match(text(r), /language must be one of python, javascript, typescript, bash, sh/);
    for (const extra of [{ network: true }, { memoryMb: 4096 }, { timeout: 600000 }, { allowedHosts: ['https://example.com'] },
      { sandboxId: 'other-tenant', kvEnabled: true }]) {
      r = await s.call({ language: 'bash', code: 'echo ran', ...extra });
      assert.equal(r.isError, true, JSON.stringify(extra));
      assert.match(text(r), /run_code takes only language, code, stdin and files; limits and network are set by the operator/);
      assert.ok(!text(r).includes('ran\n'));
    }
    r = await s.call({ language: 'python' });
    assert.equal(r.isError, true);
    assert.match(text(r), /code/);
    // none of it crashed the server
    r = await s.call({ language: 'bash', code: 'echo still here' });
    assert.equal(r.structuredContent.stdout, 'still here\n');
    assert.deepEqual(s.errors, []);
  } finally { await s.close(); }
});

T('policy_refusal: a policy refusal (a file outside /sandbox) and moat unavailable are tool errors of one sentence', {}, async () => {
  const s = await connect();
  try {
    const r = await s.call({ language: 'python', code: 'print(1)', files: { '../etc/evil': 'x' } });
    assert.equal(r.isError, true);
    assert.equal(r.content.length, 1);
    assert.match(r.content[0].text, /^Sandbox policy violation: .*"\.\." components are not allowed\.$/);
  } finally { await s.close(); }
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'moat-mcp-test-'));
  const u = await connect(['--socket', path.join(dir, 'no-such.sock')]);
  try {
    const r = await u.call({ language: 'python', code: 'print(1)' });
    assert.equal(r.isError, true);
    assert.match(r.content[0].text, /^Sandbox provider "native" unavailable: cannot reach moat serve at unix:.*\.$/);
    assert.ok(!/\n/.test(r.content[0].text));
  } finally { await u.close(); fs.rmSync(dir, { recursive: true, force: true }); }
});

T('service: through a moat serve on a unix socket, the operator\'s limits sent; one above its max is a policy refusal', {}, async (t) => {
  const help = spawnSync(MOAT, ['serve', '--help'], { timeout: 10000 });
  if (help.status !== 0) { t.skip('moat serve --help fails (no moat serve in this build)'); return; }
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'moat-mcp-test-'));
  const sock = path.join(dir, 'moat.sock');
  fs.writeFileSync(path.join(dir, 'serve.json'), JSON.stringify({ serve: { defaults: { memoryMb: 128 }, max: { memoryMb: 128 } } }));
  const srv = spawn(MOAT, ['serve', '--socket', sock, '--pool', '0', '--no-kv', '--config', path.join(dir, 'serve.json'),
    '--runtime', path.join(ROOT, 'runtime')], { stdio: ['ignore', 'ignore', 'pipe'] });
  let srvLog = '';
  srv.stderr.on('data', (d) => { srvLog += d; });
  try {
    for (let i = 0; i < 200 && !fs.existsSync(sock) && srv.exitCode === null; i++) await new Promise((r) => setTimeout(r, 100));
    assert.ok(fs.existsSync(sock), `moat serve did not listen: ${srvLog.slice(-1000)}`);
    const s = await connect(['--socket', sock, '--one-shot', '--memory', '64M', '--timeout', '10s']);
    try {
      const { tools } = await s.client.listTools();
      assert.match(tools[0].description, /memory 64 MiB/);
      const r = await s.call({ language: 'python', code: 'print(6*7)' });
      assert.ok(!r.isError, text(r));
      assert.equal(r.structuredContent.stdout, '42\n');
      assert.equal(r.structuredContent.sandbox.memoryMb, 64);
    } finally { await s.close(); }
    const big = await connect(['--socket', sock, '--one-shot', '--memory', '512M']);
    try {
      const r = await big.call({ language: 'python', code: 'print(6*7)' });
      assert.equal(r.isError, true);
      assert.match(r.content[0].text, /^Sandbox policy violation: .*memoryMb.*\.$/);
    } finally { await big.close(); }
  } finally {
    srv.kill('SIGTERM');
    await new Promise((r) => (srv.exitCode !== null ? r() : srv.on('exit', r)));
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

T('busy: past --max-concurrent and --max-queued a call is refused as busy, and the server goes on', {}, async () => {
  const s = await connect(['--max-concurrent', '1', '--max-queued', '0']);
  try {
    const slow = s.call({ language: 'bash', code: 'sleep 3; echo slow' });
    await new Promise((r) => setTimeout(r, 500));
    const busy = await s.call({ language: 'bash', code: 'echo fast' });
    assert.equal(busy.isError, true);
    assert.equal(busy.content[0].text, 'The sandbox is busy (1 running, 0 waiting); try again when a run has finished.');
    const r = await slow;
    assert.equal(r.structuredContent.stdout, 'slow\n');
    const again = await s.call({ language: 'bash', code: 'echo fast' });
    assert.equal(again.structuredContent.stdout, 'fast\n');
  } finally { await s.close(); }
});

T('operator_limits: the operator\'s limits hold: memory from the flags, the config file under the flags', {}, async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'moat-mcp-test-'));
  fs.chmodSync(dir, 0o755);
  const cfgFile = path.join(dir, 'mcp.json');
  fs.writeFileSync(cfgFile, JSON.stringify({ memoryMb: 1024, timeout: 20000, pidsLimit: 32 }));
  fs.chmodSync(cfgFile, 0o644);
  const s = await connect(['--config', cfgFile, '--memory', '48M']);
  try {
    const { tools } = await s.client.listTools();
    assert.match(tools[0].description, /time limit 20 s, memory 48 MiB/);
    const r = await s.call({ language: 'python', code: 'b = bytearray(300 * 1024 * 1024)\nprint("held", len(b))' });
    const o = r.structuredContent;
    assert.equal(o.sandbox.memoryMb, 48);
    assert.equal(o.sandbox.timeoutMs, 20000);
    assert.equal(o.sandbox.pidsLimit, 32);
    assert.ok(!o.stdout.includes('held'), `300 MiB under a 48 MiB limit: ${text(r)}`);
    assert.ok(o.killedBy === 'oom' || /MemoryError/.test(o.stderr), text(r));
    assert.notEqual(o.limits.memory, 'none');
  } finally { await s.close(); fs.rmSync(dir, { recursive: true, force: true }); }
});

T('hundred_calls: a hundred calls: every answer right, then no process and no cgroup leaf left', { timeout: 600000 }, async () => {
  const s = await connect(['--timeout', '20s']);
  const pid = s.transport.pid;
  const dirs = leafDirs(pid);
  const before = leaves(dirs);
  try {
    for (let i = 0; i < 100; i++) {
      const language = ['bash', 'python', 'javascript', 'sh'][i % 4];
      const code = language === 'python' ? `print(${i})` : language === 'javascript' ? `console.log(${i})` : `echo ${i}`;
      const r = await s.call({ language, code });
      assert.ok(!r.isError, `call ${i}: ${text(r)}`);
      assert.equal(r.structuredContent.stdout, `${i}\n`, `call ${i}`);
    }
    assert.deepEqual(descendants(pid), [], 'processes left under the server after its runs');
    const left = [...leaves(dirs)].filter((l) => !before.has(l) &&
      !alive(Number(/moat-(\d+)-/.exec(path.basename(l))[1])));
    assert.deepEqual(left, [], 'cgroup leaves left behind');
    assert.deepEqual(s.errors, []);
    // the log has one line per call and nothing of the programs
    const lines = s.log().split('\n').filter((l) => /^moat mcp: run_code [a-z]+: /.test(l));
    assert.equal(lines.length, 100);
    assert.ok(!/echo|print|console/.test(s.log()), 'the log shows code');
  } finally { await s.close(); }
  // the server went away with its client, and took nothing with it
  for (let i = 0; i < 50 && alive(pid); i++) await new Promise((r) => setTimeout(r, 100));
  assert.equal(alive(pid), false, 'moat mcp still running after its client closed');
});

T('startup_errors: moat mcp says clearly what is missing: node, the server, the SDK; a bad setting', {}, () => {
  const run = (args, env) => spawnSync(MOAT, ['mcp', ...args], { encoding: 'utf8', env: { HOME: '/nonexistent', ...env } });
  let r = run([], { PATH: '/nonexistent' });
  assert.equal(r.status, 3);
  assert.match(r.stderr, /^moat mcp: node \(Node\.js 18 or later\) is not on PATH/);
  assert.equal(r.stdout, '');
  r = run([], { PATH: process.env.PATH, MOAT_MCP_BIN: '/nonexistent/mcp.js' });
  assert.equal(r.status, 3);
  assert.match(r.stderr, /MOAT_MCP_BIN=\/nonexistent\/mcp\.js: cannot read it/);
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'moat-mcp-test-'));
  try {
    fs.chmodSync(dir, 0o755);
    for (const f of ['mcp.js', 'index.js', 'package.json']) {
      fs.copyFileSync(path.join(ROOT, 'clients/node', f), path.join(dir, f));
      fs.chmodSync(path.join(dir, f), 0o644);
    }
    r = run([], { PATH: process.env.PATH, MOAT_MCP_BIN: path.join(dir, 'mcp.js') });
    assert.equal(r.status, 3);
    assert.match(r.stderr, /the MCP SDK \(@modelcontextprotocol\/sdk, zod\) is not installed beside/);
    assert.equal(r.stdout, '');
  } finally { fs.rmSync(dir, { recursive: true, force: true }); }
  r = run(['--memory', 'lots'], { PATH: process.env.PATH });
  assert.equal(r.status, 2);
  assert.match(r.stderr, /--memory: expected a size like 256M or 1G, got "lots"/);
  r = run(['--kv-enabled'], { PATH: process.env.PATH });
  assert.equal(r.status, 2);
  assert.match(r.stderr, /kvEnabled needs a sandboxId/);
  assert.equal(r.stdout, '');
});

// ---- --session (docs/MCP.md, "Sessions") -------------------------------------------------

T('session_flag: --session needs --url or --socket', {}, () => {
  const r = spawnSync(MOAT, ['mcp', '--session'], { encoding: 'utf8', env: { PATH: process.env.PATH, HOME: '/nonexistent' } });
  assert.equal(r.status, 2);
  assert.match(r.stderr, /--session needs --url or --socket/);
  assert.equal(r.stdout, '');
});

// A fake moat serve on a unix socket with sessions: a step answers `value` = the session's
// step count; code "EXIT" ends the session as os._exit would; `gone` ids answer 410; a step
// while another runs in the same session answers 409 (what mcp.js must never cause).
function fakeSessionService(sock) {
  const http = require('node:http');
  const seen = [];
  const live = new Map(); // id → { language, runs, running }
  const gone = new Set();
  let n = 0;
  const answer = (res, status, obj) => {
    res.writeHead(status, { 'Content-Type': 'application/json' });
    res.end(JSON.stringify(obj));
  };
  const srv = http.createServer((req, res) => {
    let raw = '';
    req.on('data', (d) => { raw += d; });
    req.on('end', () => {
      const body = raw ? JSON.parse(raw) : undefined;
      seen.push({ method: req.method, url: req.url, body });
      const m = /^\/v1\/sessions\/(ses_[0-9a-f]{32})(\/run)?$/.exec(req.url);
      if (req.method === 'POST' && req.url === '/v1/sessions') {
        const id = `ses_${(++n).toString(16).padStart(32, '0')}`;
        live.set(id, { language: body.language, runs: 0, running: false });
        return answer(res, 201, { id, language: body.language, expiresAt: 'x', idleExpiresAt: 'x' });
      }
      if (req.method === 'POST' && req.url === '/v1/run') {
        return answer(res, 200, { stdout: 'cold\n', stderr: '', exitCode: 0, timedOut: false, durationMs: 1 });
      }
      if (!m) return answer(res, 404, { error: { type: 'NotFound', message: 'no such route' } });
      const id = m[1];
      if (gone.has(id)) return answer(res, 410, { error: { type: 'SessionGone', message: 'the session was killed: memory limit exceeded (64 MiB)' } });
      const ses = live.get(id);
      if (!ses) return answer(res, 404, { error: { type: 'SessionNotFound', message: 'no such session' } });
      if (req.method === 'DELETE') { live.delete(id); return answer(res, 200, { id, state: 'ended' }); }
      if (ses.running) return answer(res, 409, { error: { type: 'SessionBusy', message: 'a step is running' } });
      ses.running = true;
      setTimeout(() => {
        ses.running = false;
        ses.runs++;
        const ended = body.code === 'EXIT';
        if (ended) { live.delete(id); gone.add(id); }
        answer(res, 200, { stdout: `${ses.language} step ${ses.runs}\n`, stderr: '', exitCode: ended ? 3 : 0,
          timedOut: false, durationMs: 200, error: body.code === 'RAISE' ? { type: 'ValueError', message: 'v' } : null,
          value: String(ses.runs), display: [],
          session: { id, state: ended ? 'ended' : 'idle', runs: ses.runs } });
      }, 200);
      return undefined;
    });
  });
  return {
    seen, live, gone,
    listen: () => new Promise((r) => srv.listen(sock, r)),
    close: () => new Promise((r) => srv.close(() => r())),
  };
}

T('session (fake service): one session per language per connection, calls serialised, state reported, a dead session replaced, all closed at the end', {}, async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'moat-mcp-test-'));
  const sock = path.join(dir, 'fake.sock');
  const fake = fakeSessionService(sock);
  await fake.listen();
  try {
    const s = await connect(['--socket', sock, '--session', '--memory', '64M', '--timeout', '10s']);
    let closed = false;
    try {
      const { tools } = await s.client.listTools();
      assert.match(tools[0].description, /one interpreter kept for this conversation/);
      // two calls at once: one session made, its steps one after the other (no 409)
      const [a, b] = await Promise.all([s.call({ language: 'python', code: 'x = 1' }),
        s.call({ language: 'python', code: 'x += 1\nx' })]);
      for (const r of [a, b]) assert.ok(!r.isError, text(r));
      assert.deepEqual([a, b].map((r) => r.structuredContent.value).sort(), ['1', '2']);
      assert.deepEqual(b.structuredContent.session.state, 'idle');
      const creates = () => fake.seen.filter((q) => q.url === '/v1/sessions');
      assert.equal(creates().length, 1);
      assert.deepEqual(creates()[0].body, { language: 'python', memoryMb: 64 });
      const runs = fake.seen.filter((q) => /\/run$/.test(q.url) && q.url !== '/v1/run');
      assert.equal(runs.length, 2);
      assert.deepEqual(runs[0].body.timeout, 10000);
      assert.match(text(b), /--- value ---\n[12]/);
      // the step's exception is in the result, not a tool error
      const raised = await s.call({ language: 'python', code: 'RAISE' });
      assert.ok(!raised.isError, text(raised));
      assert.deepEqual(raised.structuredContent.error, { type: 'ValueError', message: 'v' });
      assert.match(text(raised), /--- raised ---\nValueError: v/);
      // javascript: a session of its own; bash: a cold run
      const js = await s.call({ language: 'javascript', code: 'var y = 1' });
      assert.equal(js.structuredContent.value, '1');
      assert.equal(creates().length, 2);
      assert.equal(creates()[1].body.language, 'javascript');
      const sh = await s.call({ language: 'bash', code: 'echo cold' });
      assert.equal(sh.structuredContent.stdout, 'cold\n');
      assert.equal(sh.structuredContent.value, undefined);
      // an interpreter that exits: said so; the next call makes a new session
      const exit = await s.call({ language: 'python', code: 'EXIT' });
      assert.equal(exit.structuredContent.session.state, 'ended');
      assert.match(text(exit), /state is lost/);
      const fresh = await s.call({ language: 'python', code: 'x' });
      assert.ok(!fresh.isError, text(fresh));
      assert.equal(fresh.structuredContent.value, '1');
      assert.equal(creates().length, 3);
      // a session the service killed (410): a tool error saying the state is lost, then a new one
      for (const [id, ses] of [...fake.live]) {
        if (ses.language === 'python') { fake.gone.add(id); fake.live.delete(id); }
      }
      const dead = await s.call({ language: 'python', code: 'x' });
      assert.equal(dead.isError, true);
      assert.match(text(dead), /interpreter of this conversation has ended \(the session was killed: memory limit exceeded \(64 MiB\)\)\. Its state is lost/);
      const again = await s.call({ language: 'python', code: 'x' });
      assert.ok(!again.isError, text(again));
      assert.equal(creates().length, 4);
      // the id never reaches the log
      assert.ok(!/ses_[0-9a-f]{8}/.test(s.log()), 'a session id in the log');
      const live = [...fake.live.keys()];
      assert.equal(live.length, 2); // python (the 4th) and javascript
      await s.close();
      closed = true;
      for (let i = 0; i < 100 && fake.live.size > 0; i++) await new Promise((r) => setTimeout(r, 50));
      assert.deepEqual([...fake.live.keys()], [], 'sessions left open after the connection ended');
      const deletes = fake.seen.filter((q) => q.method === 'DELETE').map((q) => q.url).sort();
      assert.ok(live.every((id) => deletes.includes(`/v1/sessions/${id}`)), JSON.stringify(deletes));
    } finally { if (!closed) await s.close(); }
  } finally {
    await fake.close();
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

T('session_default: through a service state is kept by default (one session per language); --one-shot and "session": false give fresh runs', {}, async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'moat-mcp-test-'));
  fs.chmodSync(dir, 0o755);
  const sock = path.join(dir, 'fake.sock');
  const fake = fakeSessionService(sock);
  await fake.listen();
  const creates = () => fake.seen.filter((q) => q.url === '/v1/sessions').length;
  const runs = () => fake.seen.filter((q) => q.url === '/v1/run').length;
  try {
    // no flag: a session per language, state between calls
    const s = await connect(['--socket', sock]);
    try {
      const { tools } = await s.client.listTools();
      assert.match(tools[0].description, /one interpreter kept for this conversation/);
      const a = await s.call({ language: 'python', code: 'x = 1' });
      const b = await s.call({ language: 'python', code: 'x' });
      for (const r of [a, b]) assert.ok(!r.isError, text(r));
      assert.equal(b.structuredContent.value, '2');
      assert.equal(creates(), 1);
      assert.equal(runs(), 0);
      const sh = await s.call({ language: 'bash', code: 'echo cold' });
      assert.equal(sh.structuredContent.stdout, 'cold\n');
      assert.equal(runs(), 1);
    } finally { await s.close(); }
    // --one-shot, and "session": false in the config file: every call a fresh run
    const cfg = path.join(dir, 'mcp.json');
    fs.writeFileSync(cfg, JSON.stringify({ session: false }));
    fs.chmodSync(cfg, 0o644);
    for (const args of [['--socket', sock, '--one-shot'], ['--socket', sock, '--config', cfg]]) {
      const o = await connect(args);
      try {
        const { tools } = await o.client.listTools();
        assert.match(tools[0].description, /Each call starts from scratch/);
        const before = runs();
        const r = await o.call({ language: 'python', code: 'print(1)' });
        assert.ok(!r.isError, text(r));
        assert.equal(runs(), before + 1, args.join(' '));
        assert.equal(creates(), 1, args.join(' '));
      } finally { await o.close(); }
    }
    const both = spawnSync(MOAT, ['mcp', '--socket', '/nonexistent.sock', '--session', '--one-shot'],
      { encoding: 'utf8', env: { PATH: process.env.PATH, HOME: '/nonexistent' } });
    assert.equal(both.status, 2);
    assert.match(both.stderr, /--session and --one-shot are exclusive/);
  } finally {
    await fake.close();
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

T('session (real moat serve): a python call keeps its state for the next one', {}, async (t) => {
  const help = spawnSync(MOAT, ['serve', '--help'], { timeout: 10000 });
  if (help.status !== 0) { t.skip('moat serve --help fails (no moat serve in this build)'); return; }
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'moat-mcp-test-'));
  const sock = path.join(dir, 'moat.sock');
  const srv = spawn(MOAT, ['serve', '--socket', sock, '--pool', '0', '--no-kv', '--runtime', path.join(ROOT, 'runtime')],
    { stdio: ['ignore', 'ignore', 'pipe'] });
  let srvLog = '';
  srv.stderr.on('data', (d) => { srvLog += d; });
  try {
    for (let i = 0; i < 200 && !fs.existsSync(sock) && srv.exitCode === null; i++) await new Promise((r) => setTimeout(r, 100));
    assert.ok(fs.existsSync(sock), `moat serve did not listen: ${srvLog.slice(-1000)}`);
    const s = await connect(['--socket', sock, '--session', '--timeout', '20s']);
    try {
      let r = await s.call({ language: 'python', code: 'import math\nx = 41' });
      assert.ok(!r.isError, text(r));
      r = await s.call({ language: 'python', code: 'x += 1\nprint(math.pi > 3)\nx' });
      assert.ok(!r.isError, text(r));
      assert.equal(r.structuredContent.stdout, 'True\n');
      assert.equal(r.structuredContent.value, '42');
      assert.equal(r.structuredContent.session.runs, 2);
      // an image result (issue 46) is MCP image content, after the text
      r = await s.call({ language: 'python', code: "class P:\n    def _repr_png_(self): return b'\\x89PNG\\r\\n\\x1a\\n'\nP()" });
      assert.ok(!r.isError, text(r));
      assert.deepEqual(r.content.slice(1), [{ type: 'image', data: 'iVBORw0KGgo=', mimeType: 'image/png' }]);
      assert.equal(r.structuredContent.value, String(r.structuredContent.value));
    } finally { await s.close(); }
  } finally {
    srv.kill('SIGTERM');
    await new Promise((r) => (srv.exitCode !== null ? r() : srv.on('exit', r)));
    fs.rmSync(dir, { recursive: true, force: true });
  }
});
