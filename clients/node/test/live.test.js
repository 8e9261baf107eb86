'use strict';
// Live sandboxes (docs/SANDBOXES.md): LiveSandbox.create/connect/list, sbx.commands and
// sbx.files against a real `moat serve` ($MOAT_BIN, else ../../../build/moat) on a unix
// socket; skipped when that binary has no `serve`. Client-side refusals need no service.
const { describe, it, before, after } = require('node:test');
const assert = require('node:assert/strict');
const crypto = require('node:crypto');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { Readable } = require('node:stream');
const {
  LiveSandbox, SandboxConfigError, SandboxError, SandboxGoneError, SandboxNotFoundError, NotFoundError,
  SandboxUnavailableError,
} = require('..');
const { skip, startServe, stopServe } = require('../test-support/serve');

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'moat-live-test-'));
after(() => fs.rmSync(tmp, { recursive: true, force: true }));

describe('live sandboxes: refused before any request', () => {
  it('no service, unknown options, bad arguments → SandboxConfigError', async () => {
    const sock = path.join(tmp, 'nobody.sock');
    const refused = [
      [() => LiveSandbox.create({ memoryMb: 64 }), /need a moat serve/],
      [() => LiveSandbox.create({ socketPath: sock, memory: 64 }), /unknown option "memory"/],
      [() => LiveSandbox.create({ socketPath: sock, metadata: { a: 1 } }), /metadata/],
      [() => LiveSandbox.create({ socketPath: sock, url: 'http://127.0.0.1:1' }), /exclusive/],
      [() => LiveSandbox.connect('../x', { socketPath: sock }), /sandbox id/],
      [() => LiveSandbox.list({ socketPath: sock, limit: 0 }), /limit/],
      [() => LiveSandbox.list({ socketPath: sock, owner: 'me' }), /unknown option "owner"/],
    ];
    for (const [f, re] of refused) {
      await assert.rejects(f(), (e) => e instanceof SandboxConfigError && re.test(e.message));
    }
  });
});

describe('live sandboxes: a real moat serve on a unix socket', () => {
  const sock = path.join(tmp, 'moat.sock');
  const conn = { socketPath: sock };
  let srv;
  const made = [];
  before(async () => {
    if (skip) return;
    srv = await startServe(['--socket', sock, '--pool', '0'], { socketPath: sock });
  });
  after(async () => {
    for (const s of made) await s.kill().catch(() => {});
    if (srv) assert.deepEqual(await stopServe(srv), { code: 0, sig: null }, srv.log.slice(-2000));
  });
  const create = async (opts = {}) => {
    const s = await LiveSandbox.create({ ...conn, ...opts });
    made.push(s);
    return s;
  };

  it('create with env and metadata, commands.run with streaming callbacks, list, connect, kill', { skip }, async () => {
    const tag = crypto.randomBytes(4).toString('hex');
    const sbx = await create({ memoryMb: 128, env: { GREETING: 'hello' }, metadata: { test: tag },
      lifetimeMs: 120000 });
    assert.match(sbx.sandboxId, /^sbx_[a-z0-9-]+_[0-9a-f]{32}$/);
    assert.equal(sbx.info.state, 'running');
    assert.equal(sbx.info.memoryMb, 128);
    assert.deepEqual(sbx.info.metadata, { test: tag });

    // streaming: the first chunk comes before the command ends
    const t0 = Date.now();
    let firstAt = -1;
    const out = [];
    const err = [];
    const r = await sbx.commands.run('echo "$GREETING $WHO"; sleep 1.5; printf "\\377-bin\\n"; echo oops >&2; exit 3',
      { env: { WHO: 'world' }, onStdout: (t) => { if (firstAt < 0) firstAt = Date.now() - t0; out.push(t); },
        onStderr: (t) => err.push(t) });
    const endAt = Date.now() - t0;
    assert.equal(out.join(''), 'hello world\n\ufffd-bin\n');
    assert.equal(err.join(''), 'oops\n');
    assert.equal(r.stdout, 'hello world\n\ufffd-bin\n');
    assert.equal(r.stderr, 'oops\n');
    assert.equal(r.exitCode, 3);
    assert.equal(r.signal, null);
    assert.ok(Number.isInteger(r.pid));
    assert.ok(firstAt >= 0 && endAt - firstAt >= 1000, `first chunk at ${firstAt} ms, the end at ${endAt} ms`);

    // argv, cwd, stdin
    const a = await sbx.commands.run(['/bin/sh', '-c', 'pwd; cat'], { cwd: '/tmp', stdin: 'from stdin' });
    assert.equal(a.stdout, '/tmp\nfrom stdin');
    assert.equal(a.exitCode, 0);

    const page = await LiveSandbox.list({ ...conn, metadata: { test: tag } });
    assert.deepEqual(page.sandboxes.map((s) => s.id), [sbx.sandboxId]);
    assert.equal(page.next, null);
    assert.deepEqual((await LiveSandbox.list({ ...conn, metadata: { test: `${tag}-not` } })).sandboxes, []);
    // pages: two more with the tag, newest first, two a page
    const more = [await create({ metadata: { test: tag } }), await create({ metadata: { test: tag } })];
    const p1 = await LiveSandbox.list({ ...conn, metadata: { test: tag }, limit: 2 });
    assert.deepEqual(p1.sandboxes.map((s) => s.id), [more[1].sandboxId, more[0].sandboxId]);
    assert.equal(typeof p1.next, 'string');
    const p2 = await LiveSandbox.list({ ...conn, metadata: { test: tag }, limit: 2, next: p1.next });
    assert.deepEqual(p2.sandboxes.map((s) => s.id), [sbx.sandboxId]);
    assert.equal(p2.next, null);
    for (const m of more) await m.kill();

    const again = await LiveSandbox.connect(sbx.sandboxId, conn);
    try {
      assert.equal((await again.commands.run('echo $GREETING')).stdout, 'hello\n');
      const set = await again.setTimeout(30000);
      const left = Date.parse(set.expiresAt) - Date.now();
      assert.ok(left > 20000 && left <= 31000, `expires in ${left} ms`);
      assert.equal(again.info, set);
    } finally { again.close(); }

    await sbx.kill();
    await sbx.kill(); // idempotent
    // gone: its id is a 404 now
    await assert.rejects(LiveSandbox.connect(sbx.sandboxId, conn), (e) => {
      assert.ok(e instanceof SandboxNotFoundError, `${e.name}: ${e.message}`);
      assert.equal(e.status, 404);
      return true;
    });
  });

  it('background: a handle (pid, sendStdin, closeStdin, wait), commands.list, kill', { skip }, async () => {
    const sbx = await create();
    const seen = [];
    const h = await sbx.commands.run('while read l; do echo "got $l"; done; echo done',
      { background: true, stdin: true, onStdout: (t) => seen.push(t) });
    assert.ok(Number.isInteger(h.pid));
    const running = await sbx.commands.list();
    assert.equal(running.find((p) => p.pid === h.pid).state, 'running');
    await h.sendStdin('one\n');
    await h.sendStdin(Buffer.from('two\n'));
    await h.closeStdin();
    const r = await h.wait();
    assert.equal(r.stdout, 'got one\ngot two\ndone\n');
    assert.equal(seen.join(''), r.stdout);
    assert.equal(r.exitCode, 0);

    const sleeper = await sbx.commands.run(['sleep', '600'], { background: true });
    // info waits up to waitMs for the end: still running after 200 ms
    const t0 = Date.now();
    assert.equal((await sbx.commands.info(sleeper.pid, { waitMs: 200 })).state, 'running');
    assert.ok(Date.now() - t0 >= 190, `info answered after ${Date.now() - t0} ms`);
    await sleeper.kill();
    const k = await sleeper.wait();
    assert.equal(k.exitCode, null);
    assert.equal(k.signal, 9);
    const listed = (await sbx.commands.list()).find((p) => p.pid === sleeper.pid);
    assert.equal(listed.state, 'exited');
    const ended = await sbx.commands.info(sleeper.pid, { waitMs: 5000 });
    assert.equal(ended.state, 'exited');
    assert.equal(ended.signal, 9);

    // timeoutMs: killed, and the result says so
    const t = await sbx.commands.run('sleep 30', { timeoutMs: 300 });
    assert.equal(t.timedOut, true);
    assert.equal(t.signal, 9);
  });

  it('files: binary round trip (Buffer and stream), text, list, stat, makeDir, rename, remove; 404s', { skip }, async () => {
    const sbx = await create();
    const bin = crypto.randomBytes(300 * 1024 + 7);
    bin[0] = 0; bin[1] = 0xff; // not text
    const w = await sbx.files.write('/sandbox/data/deep/blob.bin', bin);
    assert.equal(w.size, bin.length);
    const back = await sbx.files.read('/sandbox/data/deep/blob.bin', { format: 'bytes' });
    assert.ok(Buffer.isBuffer(back));
    assert.ok(back.equals(bin), 'the bytes read back are the bytes written');
    // the sandbox sees the same bytes
    const sum = await sbx.commands.run('sha256sum /sandbox/data/deep/blob.bin');
    assert.equal(sum.stdout.split(' ')[0], crypto.createHash('sha256').update(bin).digest('hex'));

    // a stream in, a stream out, and a range
    await sbx.files.write('/tmp/streamed.bin', Readable.from([bin.subarray(0, 1000), bin.subarray(1000)]));
    const rs = await sbx.files.read('/tmp/streamed.bin', { format: 'stream' });
    const parts = [];
    for await (const c of rs) parts.push(c);
    assert.ok(Buffer.concat(parts).equals(bin));
    const part = await sbx.files.read('/tmp/streamed.bin', { format: 'bytes', range: [10, 19] });
    assert.ok(part.equals(bin.subarray(10, 20)));

    await sbx.files.write('/sandbox/hello.txt', 'héllo\n');
    assert.equal(await sbx.files.read('/sandbox/hello.txt'), 'héllo\n');
    assert.equal((await sbx.commands.run('cat /sandbox/hello.txt')).stdout, 'héllo\n');

    const st = await sbx.files.stat('/sandbox/hello.txt');
    assert.equal(st.type, 'file');
    assert.equal(st.size, Buffer.byteLength('héllo\n'));
    assert.equal(await sbx.files.makeDir('/sandbox/a/b'), true);
    assert.equal(await sbx.files.makeDir('/sandbox/a/b'), false);
    await sbx.files.rename('/sandbox/hello.txt', '/sandbox/a/b/moved.txt');
    assert.equal(await sbx.files.exists('/sandbox/hello.txt'), false);
    const entries = await sbx.files.list('/sandbox', { depth: 3 });
    assert.deepEqual(entries.map((e) => `${e.type} ${e.path}`).sort(), [
      'dir /sandbox/a', 'dir /sandbox/a/b', 'dir /sandbox/data', 'dir /sandbox/data/deep',
      'file /sandbox/a/b/moved.txt', 'file /sandbox/data/deep/blob.bin',
    ]);
    assert.equal(entries.truncated, false);
    await assert.rejects(sbx.files.remove('/sandbox/a'), (e) => e instanceof SandboxError && e.status === 409);
    await sbx.files.remove('/sandbox/a', { recursive: true });
    await assert.rejects(sbx.files.read('/sandbox/a/b/moved.txt'), (e) => {
      assert.ok(e instanceof NotFoundError, `${e.name}: ${e.message}`);
      assert.equal(e.status, 404);
      assert.equal(e.errorType, 'FileNotFound');
      return true;
    });
    // outside the writable tree: refused by the service
    await assert.rejects(sbx.files.read('/etc/passwd'), (e) => e instanceof SandboxConfigError && e.status === 400);
    await assert.rejects(sbx.files.read('/sandbox/../etc/passwd'), (e) => e instanceof SandboxConfigError);
  });

  it('an ended sandbox: SandboxGoneError with the reason (its agent killed from inside)', { skip }, async () => {
    const sbx = await create();
    // the agent is every command's parent: killing it ends the sandbox
    // the start (a 410) or its wait (its stream's last line, the error naming why)
    await assert.rejects(sbx.commands.run('kill -9 $PPID', { background: true }).then((h) => h.wait()),
      (e) => { assert.ok(e instanceof SandboxGoneError, `${e.name}: ${e.message}`); return true; });
    let err;
    for (let i = 0; i < 50 && !err; i++) {
      try { await sbx.commands.run('true'); await new Promise((r) => setTimeout(r, 100)); } catch (e) {
        // (a connection the service drops as the sandbox ends is tried again)
        if (!(e instanceof SandboxUnavailableError)) err = e;
      }
    }
    assert.ok(err instanceof SandboxGoneError, err && `${err.name}: ${err.message}`);
    assert.equal(err.status, 410);
    assert.match(err.reason, /agent was killed/);
    assert.equal(err.sandboxId, sbx.sandboxId);
    await assert.rejects(sbx.files.read('/sandbox/x'), SandboxGoneError);
    await assert.rejects(LiveSandbox.connect(sbx.sandboxId, conn), (e) =>
      e instanceof SandboxGoneError && /agent was killed/.test(e.reason));
    assert.equal(await sbx.isRunning(), false);
  });

  // (another caller's id is the service's 404 alike: serve_sandboxes' tests; one client
  // here is one caller)
  it('an unknown id is SandboxNotFoundError, on connect and on a route of a handle', { skip }, async () => {
    const sbx = await create();
    const unknown = `sbx_${'0'.repeat(32)}`;
    assert.notEqual(sbx.sandboxId, unknown);
    await assert.rejects(LiveSandbox.connect(unknown, conn), (e) => e instanceof SandboxNotFoundError &&
      e.status === 404 && e.sandboxId === unknown);
    // a deleted sandbox's handle: 404 on its routes too
    const gone = await create();
    const again = await LiveSandbox.connect(gone.sandboxId, conn);
    await gone.kill();
    await assert.rejects(again.files.stat('/sandbox'), SandboxNotFoundError);
    again.close();
  });
});
