'use strict';
// Live sandboxes (docs/SANDBOXES.md, `/v1/sandboxes`): one sandbox of a `moat serve` that
// outlives a request, with processes (`sbx.commands`) and files (`sbx.files`). Built by
// index.js with its transport helpers and error classes (makeLive below); no dependencies.
const { Readable } = require('node:stream');

// The service's ids: `sbx_<node>_` + 32 hex digits (what the client puts in a URL path)
const SANDBOX_ID = /^[A-Za-z0-9_-]{1,128}$/;
// LiveSandbox.create's keys, sent as they are (docs/SANDBOXES.md "Lifecycle")
const CREATE_KEYS = ['memoryMb', 'cpus', 'pidsLimit', 'env', 'network', 'allowedHosts', 'allowedCidrs',
  'kvEnabled', 'sandboxId', 'lifetimeMs', 'idleTimeoutMs', 'metadata', 'strictLimits'];
// the connection's keys, never sent
const CONNECTION_KEYS = ['url', 'socketPath', 'token', 'requestTimeoutMs'];
const RUN_KEYS = ['onStdout', 'onStderr', 'background', 'cwd', 'env', 'stdin', 'timeoutMs'];
// How long a control request (create, get, a file's metadata, a signal) may take before
// the client gives up on the service (a file or a process stream has no such deadline).
const CONTROL_TIMEOUT_MS = 60000;
// Bounds on what the client itself holds: an answer that is JSON (a listing is at most
// 8 MiB of JSON, docs/SANDBOXES.md "Bounds"), one NDJSON line (a 64 KiB chunk as base64
// JSON), and a command's output kept for its result (each of stdout and stderr; the
// callbacks still get everything).
const MAX_JSON_BYTES = 16 << 20;
const MAX_LINE_BYTES = 1 << 20;
const DEFAULT_MAX_OUTPUT_BYTES = 16 << 20;

function makeLive(deps) {
  const {
    http, https, serviceTarget, serviceError, richResult, SandboxError, SandboxConfigError, SandboxUnavailableError,
  } = deps;
  const provider = 'native';
  const bad = (msg) => new SandboxConfigError(msg, { provider });

  // 404 SandboxNotFound: no such sandbox for this caller (never existed, another
  // caller's, or ended long ago).
  class SandboxNotFoundError extends SandboxError {
    constructor(message, options, cause) {
      super(message, options, cause);
      this.name = 'SandboxNotFoundError';
    }
  }
  // 410 SandboxGone: the sandbox ended (killed, expired, its agent dead); `reason` says why.
  class SandboxGoneError extends SandboxError {
    constructor(message, options, cause) {
      super(message, options, cause);
      this.name = 'SandboxGoneError';
      const o = options && typeof options === 'object' ? options : {};
      this.reason = o.reason !== undefined ? String(o.reason) : this.message;
    }
  }
  // 404 FileNotFound / ProcessNotFound: inside a sandbox that is there.
  class NotFoundError extends SandboxError {
    constructor(message, options, cause) {
      super(message, options, cause);
      this.name = 'NotFoundError';
    }
  }
  // the service's error types the live routes answer, as this client's classes; the rest
  // (SandboxConfigError, Forbidden, ServerBusy...) as serviceError maps them by status
  const TYPED = {
    SandboxNotFound: SandboxNotFoundError, FileNotFound: NotFoundError, ProcessNotFound: NotFoundError,
    ContextNotFound: NotFoundError, Conflict: SandboxError, ContextBusy: SandboxError, ContextNotLive: SandboxError,
    InsufficientStorage: SandboxError,
  };
  function liveError(status, json, headers, ctx) {
    const info = json && typeof json === 'object' && json.error && typeof json.error === 'object'
      ? json.error : null;
    const type = info && typeof info.type === 'string' ? info.type : undefined;
    const message = info && info.message !== undefined && info.message !== null
      ? String(info.message) : `moat serve answered HTTP ${status} without an error object`;
    let err;
    if (status === 410 || type === 'SandboxGone') {
      err = new SandboxGoneError(message, { provider, reason: message });
    } else if (type && Object.prototype.hasOwnProperty.call(TYPED, type)) {
      err = new TYPED[type](message, { provider });
    } else if (status === 404 && (!type || type === 'NotFound') && /\/contexts(\/|$)/.test(ctx.shown)) {
      // a service without the contexts routes answers its own "no such route"
      err = new SandboxConfigError(`${message} (${ctx.method} ${ctx.shown} at ${ctx.where}: is this a ` +
        'moat serve with code contexts (docs/CONTEXTS.md)?)', { provider });
    } else if (status === 404 && !type) {
      err = new SandboxConfigError(`${message} (${ctx.method} ${ctx.shown} at ${ctx.where}: is this a ` +
        'moat serve with live sandboxes on (--max-sandboxes 0 turns them off)?)', { provider });
    } else {
      return Object.assign(serviceError(status, json, headers, ctx), { sandboxId: ctx.sandboxId });
    }
    err.status = status;
    if (type) err.errorType = type;
    if (ctx.sandboxId) err.sandboxId = ctx.sandboxId;
    return err;
  }

  // One connection to a service: url or socketPath, token. `send` is one exchange.
  function connection(opts) {
    const target = serviceTarget(opts, provider);
    const token = opts.token;
    const control = opts.requestTimeoutMs === undefined ? CONTROL_TIMEOUT_MS : opts.requestTimeoutMs;
    if (!(Number.isInteger(control) && control > 0)) throw bad('requestTimeoutMs must be a whole number of ms > 0');
    const agent = new target.mod.Agent({ keepAlive: true, timeout: 1000 });
    const inflight = new Set();
    let closed = false;

    // METHOD base+route. `json` (an object) or `body` (a Buffer, or a Readable sent
    // chunked) is the request's body. `as`: 'json' (the answer's object), 'buffer',
    // 'stream' (the IncomingMessage, once the status is right), 'ndjson' (each line's
    // object to onLine; resolves at the end). `timeout`: ms for the whole exchange, or 0
    // for none (streams). Non-`ok` statuses reject with liveError.
    function send(method, route, { json, body, headers = {}, ok = [200], as = 'json', timeout = control,
      onLine, sandboxId, shown, maxLine = MAX_LINE_BYTES } = {}) {
      if (closed) return Promise.reject(new SandboxError('the live sandbox\'s connection was closed', { provider }));
      const h = { Accept: as === 'ndjson' ? 'application/x-ndjson' : as === 'json' ? 'application/json' : '*/*', ...headers };
      let payload = null;
      if (json !== undefined) {
        payload = Buffer.from(JSON.stringify(json), 'utf8');
        h['Content-Type'] = 'application/json';
      } else if (body !== undefined && !(body instanceof Readable)) {
        payload = body;
        h['Content-Type'] = 'application/octet-stream';
      } else if (body instanceof Readable) {
        h['Content-Type'] = 'application/octet-stream';
        h['Transfer-Encoding'] = 'chunked';
      }
      if (payload) h['Content-Length'] = String(payload.length);
      else if (method === 'POST' || method === 'PUT') {
        if (!(body instanceof Readable)) h['Content-Length'] = '0';
      }
      if (token !== undefined) h.Authorization = `Bearer ${token}`;
      const ctx = { provider, where: target.where, method, path: target.base + route,
        shown: target.base + (shown || route), hasToken: token !== undefined, sandboxId };
      return new Promise((resolve, reject) => {
        let settled = false;
        let req;
        let timer = null;
        const entry = {};
        const finish = (fn, v) => {
          if (settled) return;
          settled = true;
          if (timer) clearTimeout(timer);
          if (as !== 'stream') inflight.delete(entry);
          fn(v);
        };
        entry.abort = (err) => {
          inflight.delete(entry);
          finish(reject, err);
          if (req) req.destroy(err);
        };
        if (timeout > 0) {
          timer = setTimeout(() => entry.abort(new SandboxUnavailableError(
            `moat serve did not answer ${method} ${ctx.shown} within ${timeout} ms; aborted the request`,
            { provider })), timeout);
        }
        try {
          req = target.mod.request({ ...target.options, method, path: ctx.path, headers: h, agent });
        } catch (e) {
          finish(reject, new SandboxUnavailableError(`cannot call moat serve at ${target.where}: ${e.message}`,
            { provider }));
          return;
        }
        inflight.add(entry);
        req.on('error', (e) => finish(reject, e instanceof SandboxError ? e : new SandboxUnavailableError(
          `cannot reach moat serve at ${target.where}: ${e.message}`, { provider })));
        req.on('response', (res) => {
          const cut = () => finish(reject, new SandboxUnavailableError(
            `moat serve at ${target.where} closed the connection before the whole answer`, { provider }));
          if (!ok.includes(res.statusCode)) {
            collect(res, MAX_JSON_BYTES, (err, raw) => {
              if (err) { cut(); return; }
              let j;
              try { j = JSON.parse(raw.toString('utf8')); } catch { j = undefined; }
              finish(reject, liveError(res.statusCode, j, res.headers, ctx));
            });
            return;
          }
          if (as === 'stream') {
            // the caller reads it; its end (or destroy) leaves the in-flight set
            const done = () => inflight.delete(entry);
            res.on('end', done);
            res.on('close', done);
            res.on('aborted', () => res.destroy(new SandboxUnavailableError(
              `moat serve at ${target.where} closed the connection before the whole file`, { provider })));
            finish(resolve, res);
            return;
          }
          if (as === 'ndjson') {
            let pending = Buffer.alloc(0);
            const line = (buf) => {
              if (!buf.length) return;
              let obj;
              try { obj = JSON.parse(buf.toString('utf8')); } catch { obj = undefined; }
              if (!obj || typeof obj !== 'object') {
                entry.abort(new SandboxUnavailableError(`moat serve at ${target.where} sent a stream line ` +
                  'that is not a JSON object', { provider }));
                return;
              }
              try { onLine(obj); } catch (e) { entry.abort(e); }
            };
            res.on('data', (d) => {
              if (settled) return;
              pending = pending.length ? Buffer.concat([pending, d]) : d;
              let i;
              while (!settled && (i = pending.indexOf(10)) >= 0) {
                line(pending.subarray(0, i));
                pending = pending.subarray(i + 1);
              }
              if (pending.length > maxLine) {
                entry.abort(new SandboxUnavailableError(`moat serve at ${target.where} sent a stream line ` +
                  `over ${maxLine} bytes`, { provider }));
              }
            });
            res.on('aborted', cut);
            res.on('error', cut);
            res.on('end', () => {
              if (!res.complete) { cut(); return; }
              if (pending.length) line(pending);
              finish(resolve, undefined);
            });
            return;
          }
          collect(res, as === 'json' ? MAX_JSON_BYTES : Infinity, (err, raw) => {
            if (err) { finish(reject, err === 'big' ? new SandboxUnavailableError(
              `moat serve at ${target.where} sent an answer over ${MAX_JSON_BYTES} bytes`, { provider }) : err);
              cut(); return; }
            if (as === 'buffer') { finish(resolve, raw); return; }
            let j;
            try { j = JSON.parse(raw.toString('utf8')); } catch { j = undefined; }
            if (!j || typeof j !== 'object' || Array.isArray(j)) {
              finish(reject, new SandboxUnavailableError('moat serve answered with something that is not ' +
                'a JSON object', { provider }));
              return;
            }
            finish(resolve, j);
          });
        });
        if (body instanceof Readable) {
          body.on('error', (e) => entry.abort(new SandboxError(`the body stream failed: ${e.message}`,
            { provider, cause: e })));
          body.pipe(req);
        } else {
          req.end(payload || undefined);
        }
      });
    }

    function close() {
      if (closed) return;
      closed = true;
      for (const e of [...inflight]) {
        e.abort(new SandboxError('the live sandbox\'s connection was closed while a request was in flight; ' +
          'the request was aborted', { provider }));
      }
      agent.destroy();
    }
    return { send, close, get closed() { return closed; } };
  }

  // Reads a whole body, at most max bytes: cb(null, Buffer) | cb('big') | cb(error).
  function collect(res, max, cb) {
    const chunks = [];
    let n = 0;
    let done = false;
    res.on('data', (d) => {
      if (done) return;
      n += d.length;
      if (n > max) { done = true; res.destroy(); cb('big'); return; }
      chunks.push(d);
    });
    const fail = () => { if (!done) { done = true; cb(new Error('cut')); } };
    res.on('aborted', fail);
    res.on('error', fail);
    res.on('end', () => {
      if (done) return;
      done = true;
      if (!res.complete) cb(new Error('cut'));
      else cb(null, Buffer.concat(chunks));
    });
  }

  function splitOptions(opts, what) {
    if (opts === undefined || opts === null) opts = {};
    if (typeof opts !== 'object' || Array.isArray(opts)) throw bad(`${what}: opts must be an object`);
    const conn = {};
    const rest = {};
    for (const [k, v] of Object.entries(opts)) {
      if (v === undefined) continue;
      if (CONNECTION_KEYS.includes(k)) conn[k] = v;
      else rest[k] = v;
    }
    if (conn.url === undefined && conn.socketPath === undefined) {
      throw bad(`${what}: live sandboxes need a moat serve: give url or socketPath (docs/SANDBOXES.md)`);
    }
    return { conn, rest };
  }

  function checkPath(p, name = 'path') {
    if (typeof p !== 'string' || p === '' || p.includes('\0')) {
      throw bad(`${name} must be a non-empty string (an absolute path under /sandbox or /tmp)`);
    }
    return p;
  }

  function toBuffer(data, what) {
    if (typeof data === 'string') return Buffer.from(data, 'utf8');
    if (Buffer.isBuffer(data)) return data;
    if (ArrayBuffer.isView(data)) return Buffer.from(data.buffer, data.byteOffset, data.byteLength);
    if (data instanceof ArrayBuffer) return Buffer.from(data);
    throw bad(`${what} must be a string, a Buffer, a typed array or an ArrayBuffer`);
  }

  // ---- processes ------------------------------------------------------------------------

  // One process's output read from an NDJSON stream (start, stdout/stderr, exit, error):
  // the callbacks get text (bytes that are not UTF-8 decoded with U+FFFD); the result keeps
  // up to maxOutputBytes of each stream.
  function outputReader(cb, maxOutput) {
    const kept = { stdout: [], stderr: [] };
    const size = { stdout: 0, stderr: 0 };
    const cut = { stdout: false, stderr: false };
    const st = { pid: undefined, exit: undefined, error: undefined, onStart: null };
    function onLine(obj) {
      if (obj.type === 'start') {
        st.pid = obj.pid;
        if (st.onStart) st.onStart(obj.pid);
        return;
      }
      if (obj.type === 'exit') { st.exit = obj; return; }
      if (obj.type === 'error') { st.error = obj.error && typeof obj.error === 'object' ? obj.error : {}; return; }
      if ((obj.type !== 'stdout' && obj.type !== 'stderr') || typeof obj.data !== 'string') return;
      const bytes = obj.encoding === 'base64' ? Buffer.from(obj.data, 'base64') : Buffer.from(obj.data, 'utf8');
      const k = obj.type;
      const room = maxOutput - size[k];
      if (bytes.length <= room) { kept[k].push(bytes); size[k] += bytes.length; } else {
        if (room > 0) { kept[k].push(bytes.subarray(0, room)); size[k] += room; }
        cut[k] = true;
      }
      const f = k === 'stdout' ? cb.onStdout : cb.onStderr;
      if (f) f(obj.encoding === 'base64' ? bytes.toString('utf8') : obj.data);
    }
    function result(timedOut) {
      if (st.error) {
        const e = st.error;
        const m = typeof e.message === 'string' ? e.message : 'the sandbox ended before the process did';
        return { error: e.type === 'SandboxGone' || e.type === undefined
          ? new SandboxGoneError(m, { provider, reason: m }) : new SandboxError(m, { provider }) };
      }
      if (!st.exit) {
        return { error: new SandboxUnavailableError('the process\'s output stream ended without its exit',
          { provider }) };
      }
      return { value: {
        pid: st.exit.pid,
        exitCode: st.exit.exitCode === undefined ? null : st.exit.exitCode,
        signal: st.exit.signal === undefined ? null : st.exit.signal,
        stdout: Buffer.concat(kept.stdout).toString('utf8'),
        stderr: Buffer.concat(kept.stderr).toString('utf8'),
        stdoutTruncated: cut.stdout,
        stderrTruncated: cut.stderr,
        timedOut: !!timedOut,
      } };
    }
    return { onLine, result, st };
  }

  function checkRunOptions(opts) {
    if (opts === undefined || opts === null) opts = {};
    if (typeof opts !== 'object' || Array.isArray(opts)) throw bad('commands.run(cmd, opts): opts must be an object');
    for (const k of Object.keys(opts)) {
      if (!RUN_KEYS.includes(k) && k !== 'maxOutputBytes') {
        throw bad(`commands.run(cmd, opts): unknown option ${JSON.stringify(k).slice(0, 60)}`);
      }
    }
    for (const k of ['onStdout', 'onStderr']) {
      if (opts[k] !== undefined && typeof opts[k] !== 'function') throw bad(`${k} must be a function`);
    }
    if (opts.cwd !== undefined) checkPath(opts.cwd, 'cwd');
    if (opts.env !== undefined && (opts.env === null || typeof opts.env !== 'object' || Array.isArray(opts.env) ||
        Object.values(opts.env).some((v) => typeof v !== 'string'))) {
      throw bad('env must be an object of name → string');
    }
    if (opts.timeoutMs !== undefined && !(Number.isInteger(opts.timeoutMs) && opts.timeoutMs > 0)) {
      throw bad('timeoutMs must be a whole number of ms > 0');
    }
    if (opts.maxOutputBytes !== undefined && !(Number.isInteger(opts.maxOutputBytes) && opts.maxOutputBytes >= 0)) {
      throw bad('maxOutputBytes must be a whole number >= 0');
    }
    if (opts.stdin !== undefined && opts.stdin !== true && opts.stdin !== false) toBuffer(opts.stdin, 'stdin');
    return opts;
  }

  function processRequest(cmd, opts) {
    const request = {};
    if (typeof cmd === 'string') request.cmd = cmd;
    else if (Array.isArray(cmd) && cmd.length > 0 && cmd.every((a) => typeof a === 'string')) request.argv = cmd;
    else throw bad('cmd must be a shell line (a string) or an argv (a non-empty array of strings)');
    if (opts.env !== undefined) request.env = opts.env;
    if (opts.cwd !== undefined) request.cwd = opts.cwd;
    request.stdin = opts.stdin !== undefined && opts.stdin !== false;
    return request;
  }

  class Commands {
    constructor(sbx) { Object.defineProperty(this, '_sbx', { value: sbx }); }

    // Runs cmd (a shell line, or an argv array) and resolves with {pid, exitCode, signal,
    // stdout, stderr, ...} when it exits; `background: true` resolves at once with a
    // CommandHandle. onStdout/onStderr get the output as it comes.
    async run(cmd, opts) {
      const o = checkRunOptions(opts);
      const request = processRequest(cmd, o);
      const x = this._sbx;
      const maxOutput = o.maxOutputBytes === undefined ? DEFAULT_MAX_OUTPUT_BYTES : o.maxOutputBytes;
      if (o.background) {
        const started = await x._send('POST', '/processes', { json: request, ok: [201] });
        if (!Number.isInteger(started.pid)) {
          throw new SandboxUnavailableError('moat serve started a process without a pid', { provider });
        }
        const handle = new CommandHandle(x, started.pid, o, maxOutput);
        if (request.stdin && o.stdin !== true) await handle._feed(o.stdin);
        return handle;
      }
      const reader = outputReader(o, maxOutput);
      let timedOut = false;
      let timer = null;
      const side = [];
      reader.st.onStart = (pid) => {
        if (request.stdin && o.stdin !== true) {
          side.push(feed(x, pid, o.stdin).catch((e) => e));
        }
        if (o.timeoutMs) {
          timer = setTimeout(() => {
            timedOut = true;
            side.push(signal(x, pid, 'KILL').catch((e) => e));
          }, o.timeoutMs);
        }
      };
      try {
        await x._send('POST', '/processes?stream=1', { json: request, as: 'ndjson', timeout: 0,
          onLine: reader.onLine });
      } finally {
        if (timer) clearTimeout(timer);
      }
      const errs = (await Promise.all(side)).filter((e) => e instanceof Error);
      const r = reader.result(timedOut);
      if (r.error) throw r.error;
      if (errs.length && r.value.exitCode === null && !timedOut) throw errs[0];
      return r.value;
    }

    // Re-attaches to a running process's output (after a client hung up): a CommandHandle.
    async connect(pid, opts) {
      if (!Number.isInteger(pid) || pid <= 0) throw bad('pid must be a whole number > 0');
      const o = checkRunOptions(opts);
      return new CommandHandle(this._sbx, pid, o, o.maxOutputBytes === undefined
        ? DEFAULT_MAX_OUTPUT_BYTES : o.maxOutputBytes);
    }

    // Every process the sandbox keeps: [{pid, state, exitCode, signal, attached, stdin}].
    async list() {
      const j = await this._sbx._send('GET', '/processes');
      return Array.isArray(j.processes) ? j.processes : [];
    }

    // {pid, state, exitCode, signal} after waiting up to waitMs (0-60000) for it to end.
    async info(pid, { waitMs = 0 } = {}) {
      if (!Number.isInteger(pid) || pid <= 0) throw bad('pid must be a whole number > 0');
      if (!(Number.isInteger(waitMs) && waitMs >= 0 && waitMs <= 60000)) throw bad('waitMs must be 0-60000');
      return this._sbx._send('GET', `/processes/${pid}?wait=${waitMs}`, { timeout: CONTROL_TIMEOUT_MS + waitMs });
    }

    kill(pid, sig = 'KILL') { return signal(this._sbx, pid, sig); }
    sendStdin(pid, data) { return sendStdin(this._sbx, pid, data); }
    closeStdin(pid) { return closeStdin(this._sbx, pid); }
  }

  function checkPid(pid) {
    if (!Number.isInteger(pid) || pid <= 0) throw bad('pid must be a whole number > 0');
  }
  async function signal(x, pid, sig) {
    checkPid(pid);
    if (!(typeof sig === 'string' || Number.isInteger(sig))) throw bad('signal must be a name ("TERM") or a number');
    await x._send('POST', `/processes/${pid}/signal`, { json: { signal: sig } });
  }
  // Writes data to the process's stdin (the service waits up to 10 s for room): {written, complete}.
  async function sendStdin(x, pid, data) {
    checkPid(pid);
    return x._send('POST', `/processes/${pid}/stdin`, { body: toBuffer(data, 'stdin data') });
  }
  async function closeStdin(x, pid) {
    checkPid(pid);
    await x._send('POST', `/processes/${pid}/stdin/close`);
  }
  async function feed(x, pid, data) {
    const buf = toBuffer(data, 'stdin');
    // the service takes at most 6 MiB a request
    for (let off = 0; off < buf.length; off += 4 << 20) {
      const part = buf.subarray(off, off + (4 << 20));
      const r = await sendStdin(x, pid, part);
      if (r && r.complete === false) {
        throw new SandboxError(`the process took ${off + (r.written || 0)} of ${buf.length} bytes of stdin ` +
          'within the service\'s 10 s', { provider });
      }
    }
    await closeStdin(x, pid);
  }

  // A process started with `background: true` (or reattached with commands.connect): its
  // output is read as it comes (to the callbacks, kept for wait()'s result).
  class CommandHandle {
    constructor(x, pid, o, maxOutput) {
      this.pid = pid;
      Object.defineProperty(this, '_x', { value: x });
      const reader = outputReader(o, maxOutput);
      const attached = x._send('GET', `/processes/${pid}/output`, {
        as: 'ndjson', timeout: 0, onLine: reader.onLine, shown: '/processes/{pid}/output',
      });
      this._done = attached.then(() => {
        const r = reader.result(this._timedOut);
        if (r.error) throw r.error;
        return r.value;
      });
      // an unobserved failure is not an unhandled rejection: wait() reports it
      this._done.catch(() => {});
      this._timedOut = false;
      if (o.timeoutMs) {
        const t = setTimeout(() => { this._timedOut = true; this.kill('KILL').catch(() => {}); }, o.timeoutMs);
        this._done.then(() => clearTimeout(t), () => clearTimeout(t));
      }
    }
    _feed(data) { return feed(this._x, this.pid, data); }
    // Its result once it exits (as commands.run's).
    wait() { return this._done; }
    kill(sig = 'KILL') { return signal(this._x, this.pid, sig); }
    sendStdin(data) { return sendStdin(this._x, this.pid, data); }
    closeStdin() { return closeStdin(this._x, this.pid); }
  }

  // ---- files ---------------------------------------------------------------------------

  const q = (p) => encodeURIComponent(p);
  class Files {
    constructor(sbx) { Object.defineProperty(this, '_sbx', { value: sbx }); }

    // Writes data (a string, Buffer, typed array, ArrayBuffer, or a Readable streamed as it
    // comes) to path, creating missing parents unless `mkdirs: false`: {path, size}.
    async write(path, data, { mkdirs = true } = {}) {
      checkPath(path);
      const body = data instanceof Readable ? data : toBuffer(data, 'data');
      return this._sbx._send('PUT', `/files?path=${q(path)}${mkdirs ? '&mkdirs=1' : ''}`,
        { body, ok: [201, 200], timeout: body instanceof Readable ? 0 : undefined, shown: '/files' });
    }

    // The file: text (UTF-8, the default), bytes (a Buffer) or a stream (a Readable, read
    // as the service sends it). `range: [start, end]` (inclusive, end optional) reads a part.
    async read(path, { format = 'text', range } = {}) {
      checkPath(path);
      if (!['text', 'bytes', 'stream'].includes(format)) throw bad('format must be "text", "bytes" or "stream"');
      const headers = {};
      if (range !== undefined) {
        if (!Array.isArray(range) || !Number.isInteger(range[0]) || range[0] < 0 ||
            (range[1] !== undefined && !(Number.isInteger(range[1]) && range[1] >= range[0]))) {
          throw bad('range must be [start, end?]: whole numbers, end >= start');
        }
        headers.Range = `bytes=${range[0]}-${range[1] === undefined ? '' : range[1]}`;
      }
      const as = format === 'stream' ? 'stream' : 'buffer';
      const r = await this._sbx._send('GET', `/files?path=${q(path)}`, { headers, as, ok: [200, 206],
        timeout: 0, shown: '/files' });
      return format === 'text' ? r.toString('utf8') : r;
    }

    // Entries under path, `depth` levels down (1-32): [{path, type, size, mode, mtimeMs}];
    // the array's `truncated` says a bound (10000 entries) was reached.
    async list(path, { depth = 1 } = {}) {
      checkPath(path);
      if (!(Number.isInteger(depth) && depth >= 1 && depth <= 32)) throw bad('depth must be 1-32');
      const j = await this._sbx._send('GET', `/files/list?path=${q(path)}&depth=${depth}`, { shown: '/files/list' });
      const entries = Array.isArray(j.entries) ? j.entries : [];
      Object.defineProperty(entries, 'truncated', { value: j.truncated === true, enumerable: false });
      return entries;
    }

    // {path, type, size, mode, mtimeMs}; a symlink is described, not followed.
    stat(path) {
      checkPath(path);
      return this._sbx._send('GET', `/files/stat?path=${q(path)}`, { shown: '/files/stat' });
    }

    async exists(path) {
      try { await this.stat(path); return true; } catch (e) {
        if (e instanceof NotFoundError) return false;
        throw e;
      }
    }

    // Makes the directory (and its parents unless `parents: false`): true, or false when a
    // directory was there already (something else there is a 409 SandboxError).
    async makeDir(path, { parents = true } = {}) {
      checkPath(path);
      try {
        if ((await this.stat(path)).type === 'dir') return false;
      } catch (e) {
        if (!(e instanceof NotFoundError)) throw e;
      }
      await this._sbx._send('POST', '/files/mkdir', { json: { path, parents }, ok: [200, 201] });
      return true;
    }

    async rename(from, to) {
      checkPath(from, 'from');
      checkPath(to, 'to');
      await this._sbx._send('POST', '/files/rename', { json: { from, to }, ok: [200, 201] });
    }

    // Removes a file or an empty directory; `recursive: true` a whole tree.
    async remove(path, { recursive = false } = {}) {
      checkPath(path);
      await this._sbx._send('DELETE', `/files?path=${q(path)}${recursive ? '&recursive=1' : ''}`, { shown: '/files' });
    }
  }


  // ---- code contexts (docs/CONTEXTS.md) -------------------------------------------------

  // The step's error: {name, value, traceback: [lines]} (the service's type/message too).
  function executionError(e) {
    if (!e || typeof e !== 'object') return null;
    const name = typeof e.name === 'string' ? e.name : typeof e.type === 'string' ? e.type : 'Error';
    const value = typeof e.value === 'string' ? e.value : typeof e.message === 'string' ? e.message : '';
    const traceback = Array.isArray(e.traceback) ? e.traceback.filter((l) => typeof l === 'string') : [];
    return { ...e, name, value, traceback };
  }

  // What runCode resolves with.
  class Execution {
    constructor() {
      this.results = [];
      this.logs = { stdout: [], stderr: [] };
      this.error = null;
      this.executionCount = null;
      // the step's exit as a session's (sys.exit included); null when the interpreter
      // ended without answering
      this.exitCode = null;
      this.timedOut = false;
      this.interrupted = false;
      this.killed = false;
      this.context = null;
      this.durationMs = null;
      this.warnings = [];
      this.stdoutTruncated = false;
      this.stderrTruncated = false;
      this.resultsTruncated = false;
    }

    // The last expression's value (a result with isMain), or undefined.
    get mainResult() { return this.results.find((r) => r.isMain === true); }

    // Its text/plain, or undefined.
    get text() {
      const m = this.mainResult;
      return m ? m.text : undefined;
    }

    get stdout() { return this.logs.stdout.join(''); }
    get stderr() { return this.logs.stderr.join(''); }
  }

  const LANGUAGES = { python: 'python', py: 'python', python3: 'python', javascript: 'javascript', js: 'javascript',
    node: 'javascript', typescript: 'typescript', ts: 'typescript' };
  const RUN_CODE_KEYS = ['language', 'context', 'timeoutMs', 'onStdout', 'onStderr', 'onResult', 'onError',
    'maxOutputBytes'];
  // the service sends a result of at most 4 MiB a MIME entry, 6 MiB a step; a line carries
  // one result (or the final answer, with them all) as JSON
  const MAX_CONTEXT_LINE_BYTES = 16 << 20;
  const MAX_RESULTS_BYTES = 16 << 20;
  const DEFAULT_STEP_TIMEOUT_MS = 30000;
  // the service's grace after a step's timeout before it kills the interpreter
  const INTERRUPT_GRACE_MS = 2000;
  const CONTEXT_ID = /^[A-Za-z0-9_-]{1,128}$/;

  function contextId(ctx) {
    const id = typeof ctx === 'string' ? ctx : ctx && typeof ctx === 'object' ? ctx.id : undefined;
    if (typeof id !== 'string' || !CONTEXT_ID.test(id)) throw bad('context must be a context (or its id, ctx_...)');
    return id;
  }

  function checkRunCodeOptions(opts) {
    if (opts === undefined || opts === null) opts = {};
    if (typeof opts !== 'object' || Array.isArray(opts)) throw bad('runCode(code, opts): opts must be an object');
    for (const k of Object.keys(opts)) {
      if (!RUN_CODE_KEYS.includes(k)) {
        throw bad(`runCode(code, opts): unknown option ${JSON.stringify(k).slice(0, 60)}`);
      }
    }
    for (const k of ['onStdout', 'onStderr', 'onResult', 'onError']) {
      if (opts[k] !== undefined && typeof opts[k] !== 'function') throw bad(`${k} must be a function`);
    }
    if (opts.language !== undefined && opts.context !== undefined) {
      throw bad('runCode(code, opts): give language or context, not both (a context has its language)');
    }
    if (opts.language !== undefined && !LANGUAGES[opts.language]) {
      throw bad(`language must be one of ${Object.keys(LANGUAGES).join(', ')}`);
    }
    if (opts.timeoutMs !== undefined && !(Number.isInteger(opts.timeoutMs) && opts.timeoutMs > 0)) {
      throw bad('timeoutMs must be a whole number of ms > 0');
    }
    if (opts.maxOutputBytes !== undefined && !(Number.isInteger(opts.maxOutputBytes) && opts.maxOutputBytes >= 0)) {
      throw bad('maxOutputBytes must be a whole number >= 0');
    }
    return opts;
  }

  // One step's NDJSON stream (stdout/stderr, result, error, done) into an Execution: the
  // callbacks get each event as it comes; the Execution keeps maxOutput bytes of each
  // stream and MAX_RESULTS_BYTES of results.
  function executionReader(o, maxOutput) {
    const ex = new Execution();
    const size = { stdout: 0, stderr: 0 };
    const st = { resultBytes: 0, answer: null, streamedError: null };
    function keepResult(obj) {
      const n = Buffer.byteLength(JSON.stringify(obj));
      if (st.resultBytes + n > MAX_RESULTS_BYTES) { ex.resultsTruncated = true; return null; }
      st.resultBytes += n;
      // a result read under E2B's names, as a session step's (index.js)
      const data = obj && typeof obj.data === 'object' && obj.data !== null && !Array.isArray(obj.data) ? obj.data : {};
      return richResult({ isMain: !!(obj && obj.isMain === true), data });
    }
    function onLine(obj) {
      if (obj.type === 'stdout' || obj.type === 'stderr') {
        if (typeof obj.data !== 'string') return;
        const text = obj.encoding === 'base64' ? Buffer.from(obj.data, 'base64').toString('utf8') : obj.data;
        const k = obj.type;
        const n = Buffer.byteLength(text);
        if (size[k] + n <= maxOutput) { ex.logs[k].push(text); size[k] += n; } else {
          ex[`${k}Truncated`] = true;
        }
        const f = k === 'stdout' ? o.onStdout : o.onStderr;
        if (f) f(text);
      } else if (obj.type === 'result') {
        const r = keepResult(obj.result);
        if (r) {
          ex.results.push(r);
          if (o.onResult) o.onResult(r);
        }
      } else if (obj.type === 'error') {
        st.streamedError = executionError(obj.error);
        if (o.onError && st.streamedError) o.onError(st.streamedError);
      } else if (obj.type === 'done') {
        st.answer = obj.answer && typeof obj.answer === 'object' ? obj.answer : {};
      }
    }
    function finish() {
      const a = st.answer;
      if (!a) {
        throw new SandboxUnavailableError('the step\'s stream ended without its answer', { provider });
      }
      // the answer's list is the step's whole list (the events were its parts, as they came)
      if (Array.isArray(a.results)) {
        ex.results = [];
        st.resultBytes = 0;
        for (const r of a.results) {
          const kept = keepResult(r);
          if (kept) ex.results.push(kept);
        }
      }
      // its stdout/stderr are empty when streamed; a service that sends them there is heard
      for (const k of ['stdout', 'stderr']) {
        if (typeof a[k] === 'string' && a[k] && !ex.logs[k].length) ex.logs[k].push(a[k]);
        if (a[`${k}Truncated`] === true) ex[`${k}Truncated`] = true;
      }
      ex.error = executionError(a.error) || st.streamedError;
      ex.executionCount = Number.isInteger(a.executionCount) ? a.executionCount : null;
      ex.exitCode = Number.isInteger(a.exitCode) ? a.exitCode : null;
      ex.timedOut = a.timedOut === true;
      ex.interrupted = a.interrupted === true;
      ex.killed = a.killed === true;
      ex.context = a.context && typeof a.context === 'object' ? a.context : null;
      ex.durationMs = Number.isFinite(a.durationMs) ? a.durationMs : null;
      ex.warnings = Array.isArray(a.warnings) ? a.warnings : [];
      if (a.resultsTruncated === true) ex.resultsTruncated = true;
      return ex;
    }
    return { onLine, finish };
  }

  // ---- the sandbox ---------------------------------------------------------------------

  class LiveSandbox {
    constructor(conn, info) {
      this.sandboxId = info.id;
      this.info = info;
      Object.defineProperty(this, '_conn', { value: conn });
      Object.defineProperty(this, '_route', { value: `/v1/sandboxes/${info.id}` });
      this.commands = new Commands(this);
      this.files = new Files(this);
      // runCode's default context of each language (a promise of its info)
      Object.defineProperty(this, '_defaults', { value: {} });
    }

    get id() { return this.sandboxId; }

    _send(method, sub, opts = {}) {
      return this._conn.send(method, this._route + sub, { sandboxId: this.sandboxId, ...opts,
        shown: `/v1/sandboxes/{id}${opts.shown || sub.replace(/\?.*$/, '').replace(/\/processes\/\d+/, '/processes/{pid}')}` });
    }

    // POST /v1/sandboxes: opts are the connection's (url or socketPath, token) and the
    // sandbox's (memoryMb, cpus, pidsLimit, env, network, allowedHosts, lifetimeMs,
    // idleTimeoutMs, metadata, kvEnabled, sandboxId...).
    static async create(opts) {
      const { conn, rest } = splitOptions(opts, 'LiveSandbox.create(opts)');
      for (const k of Object.keys(rest)) {
        if (!CREATE_KEYS.includes(k)) throw bad(`LiveSandbox.create(opts): unknown option ${JSON.stringify(k).slice(0, 60)}`);
      }
      if (rest.metadata !== undefined && (rest.metadata === null || typeof rest.metadata !== 'object' ||
          Array.isArray(rest.metadata) || Object.values(rest.metadata).some((v) => typeof v !== 'string'))) {
        throw bad('metadata must be an object of string → string');
      }
      const c = connection(conn);
      try {
        const info = await c.send('POST', '/v1/sandboxes', { json: rest, ok: [201] });
        if (typeof info.id !== 'string' || !SANDBOX_ID.test(info.id)) {
          throw new SandboxUnavailableError('moat serve answered POST /v1/sandboxes without a sandbox id', { provider });
        }
        return new LiveSandbox(c, info);
      } catch (e) {
        c.close();
        throw e;
      }
    }

    // A sandbox made before (by this caller's credential): GET /v1/sandboxes/{id}.
    static async connect(id, opts) {
      if (typeof id !== 'string' || !SANDBOX_ID.test(id)) throw bad('id must be a sandbox id (sbx_...)');
      const { conn } = splitOptions(opts, 'LiveSandbox.connect(id, opts)');
      const c = connection(conn);
      try {
        const info = await c.send('GET', `/v1/sandboxes/${id}`, { sandboxId: id, shown: '/v1/sandboxes/{id}' });
        if (info.state === 'ended') {
          const why = typeof info.reason === 'string' ? info.reason : 'the sandbox ended';
          throw Object.assign(new SandboxGoneError(why, { provider, reason: why }), { sandboxId: id });
        }
        return new LiveSandbox(c, info);
      } catch (e) {
        c.close();
        throw e;
      }
    }

    // The caller's own sandboxes, newest first: {sandboxes: [...], next} (`next`: pass it
    // back for the next page, null at the end). `metadata`: each pair must match.
    static async list(opts) {
      const { conn, rest } = splitOptions(opts, 'LiveSandbox.list(opts)');
      const params = [];
      for (const [k, v] of Object.entries(rest)) {
        if (k === 'limit') {
          if (!(Number.isInteger(v) && v >= 1 && v <= 1000)) throw bad('limit must be 1-1000');
          params.push(`limit=${v}`);
        } else if (k === 'next') {
          if (v === null) continue;
          if (typeof v !== 'string' || !SANDBOX_ID.test(v)) throw bad('next must be a sandbox id');
          params.push(`next=${q(v)}`);
        } else if (k === 'metadata') {
          if (v === null || typeof v !== 'object' || Array.isArray(v)) throw bad('metadata must be an object');
          for (const [mk, mv] of Object.entries(v)) {
            if (typeof mv !== 'string') throw bad('metadata values must be strings');
            params.push(`metadata.${q(mk)}=${q(mv)}`);
          }
        } else {
          throw bad(`LiveSandbox.list(opts): unknown option ${JSON.stringify(k).slice(0, 60)}`);
        }
      }
      const c = connection(conn);
      try {
        const j = await c.send('GET', `/v1/sandboxes${params.length ? `?${params.join('&')}` : ''}`,
          { shown: '/v1/sandboxes' });
        return { sandboxes: Array.isArray(j.sandboxes) ? j.sandboxes : [], next: typeof j.next === 'string' ? j.next : null };
      } finally {
        c.close();
      }
    }

    // GET /v1/sandboxes/{id}: state, limits, usage, expiresAt, metadata, reason.
    async getInfo() {
      this.info = await this._send('GET', '', { shown: '' });
      return this.info;
    }

    async isRunning() {
      try { return (await this.getInfo()).state === 'running'; } catch (e) {
        if (e instanceof SandboxGoneError || e instanceof SandboxNotFoundError) return false;
        throw e;
      }
    }

    // Its lifetime ends ms from now (never past the service's maximum after its making).
    async setTimeout(ms) {
      if (!(Number.isInteger(ms) && ms > 0)) throw bad('setTimeout(ms): ms must be a whole number > 0');
      this.info = await this._send('POST', '/timeout', { json: { lifetimeMs: ms } });
      return this.info;
    }

    // Ends it (DELETE): nothing of it is left when this resolves; idempotent (an ended one
    // is fine). Closes this client's connection.
    async kill() {
      if (this._conn.closed) return;
      try {
        await this._send('DELETE', '', { shown: '' });
      } catch (e) {
        if (!(e instanceof SandboxGoneError || e instanceof SandboxNotFoundError)) throw e;
      }
      this._conn.close();
    }

    // Closes this client's connection (aborting its streams); the sandbox lives on.
    close() { this._conn.close(); }

    // ---- code contexts (docs/CONTEXTS.md): interpreters with their own state ----

    // A new interpreter ({language: 'python'|'javascript'|'typescript', cwd}): its info,
    // {id, language, cwd, pid, state, executionCount}, once it is ready.
    async createCodeContext({ language = 'python', cwd } = {}) {
      if (!LANGUAGES[language]) throw bad(`language must be one of ${Object.keys(LANGUAGES).join(', ')}`);
      const json = { language };
      if (cwd !== undefined) json.cwd = checkPath(cwd, 'cwd');
      // the service answers once the interpreter is ready (at most 30 s)
      return this._send('POST', '/contexts', { json, ok: [201], timeout: CONTROL_TIMEOUT_MS + 30000 });
    }

    // Every context of the sandbox, oldest first.
    async listCodeContexts() {
      const j = await this._send('GET', '/contexts');
      return Array.isArray(j.contexts) ? j.contexts : [];
    }

    getCodeContext(ctx) {
      return this._send('GET', `/contexts/${contextId(ctx)}`, { shown: '/contexts/{cid}' });
    }

    // Kills its interpreter and starts a fresh one (same id, language, cwd; state gone).
    restartCodeContext(ctx) {
      return this._send('POST', `/contexts/${contextId(ctx)}/restart`, { shown: '/contexts/{cid}/restart',
        timeout: CONTROL_TIMEOUT_MS + 30000 });
    }

    async removeCodeContext(ctx) {
      const id = contextId(ctx);
      await this._send('DELETE', `/contexts/${id}`, { shown: '/contexts/{cid}' });
      for (const [lang, p] of Object.entries(this._defaults)) {
        const c = await p.catch(() => null);
        if (c && c.id === id) delete this._defaults[lang];
      }
    }

    // A KeyboardInterrupt (Python) / an interrupt (node) in its running step: true when a
    // step was running.
    async interruptCodeContext(ctx) {
      const j = await this._send('POST', `/contexts/${contextId(ctx)}/interrupt`,
        { shown: '/contexts/{cid}/interrupt' });
      return j.interrupted === true;
    }

    // Runs code in a context (`context`, or this client's default context of `language`,
    // python unless said, made at first use) and resolves with its Execution: results
    // (MIME bundles under E2B's names: .text .html .png ...; the last expression's value
    // isMain), logs, error {name, value, traceback}, executionCount, timedOut. The
    // callbacks get stdout/stderr, each result and the error as they happen.
    async runCode(code, opts) {
      if (typeof code !== 'string') throw bad('code must be a string');
      const o = checkRunCodeOptions(opts);
      let id;
      if (o.context !== undefined) id = contextId(o.context);
      else {
        const lang = LANGUAGES[o.language || 'python'];
        if (!this._defaults[lang]) {
          this._defaults[lang] = this.createCodeContext({ language: lang });
          this._defaults[lang].catch(() => { delete this._defaults[lang]; });
        }
        id = (await this._defaults[lang]).id;
      }
      const timeout = o.timeoutMs === undefined ? DEFAULT_STEP_TIMEOUT_MS : o.timeoutMs;
      const json = { code };
      if (o.timeoutMs !== undefined) json.timeout = o.timeoutMs;
      const reader = executionReader(o, o.maxOutputBytes === undefined ? DEFAULT_MAX_OUTPUT_BYTES : o.maxOutputBytes);
      // the service ends the step by its timeout and grace; the client's deadline is past both
      await this._send('POST', `/contexts/${id}/execute?stream=1`, { json, as: 'ndjson', onLine: reader.onLine,
        maxLine: MAX_CONTEXT_LINE_BYTES, timeout: timeout + INTERRUPT_GRACE_MS + CONTROL_TIMEOUT_MS,
        shown: '/contexts/{cid}/execute' });
      return reader.finish();
    }
  }

  return { LiveSandbox, SandboxNotFoundError, SandboxGoneError, NotFoundError, CommandHandle, Execution };
}

module.exports = { makeLive };
