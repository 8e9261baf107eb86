'use strict';
// moat-sandbox: the aistack sandbox contract on top of the `moat` binary.
// Every run spawns `moat exec --provider P --config F`, writes the JSON
// request to its stdin and parses the JSON result; with `url` or `socketPath`
// it POSTs the same request to a `moat serve` instead (/v1/run). No runtime
// dependencies.
const { spawn } = require('node:child_process');
const fs = require('node:fs');
const http = require('node:http');
const https = require('node:https');
const os = require('node:os');
const path = require('node:path');

const net = require('node:net');

// Two constructor forms for every error class: moat's `(message, { provider, cause })` and
// aistack's `(provider, reason[, cause])` (SandboxError itself: `(message, provider[,
// cause])`), so code written against either one builds the same errors. The subclasses'
// messages carry aistack's prefixes (src/sandbox/types.ts upstream) whichever form built them.
function errorArgs(a, b, c, subclass) {
  if (typeof b === 'string') {
    // aistack: SandboxError(message, provider, cause); a subclass (provider, reason, cause)
    return subclass ? { message: b, provider: a, cause: c } : { message: a, provider: b, cause: c };
  }
  const o = b && typeof b === 'object' ? b : {};
  return { message: a, provider: o.provider, cause: o.cause };
}
function withPrefix(prefix, message) {
  const m = message === undefined || message === null ? '' : String(message);
  return prefix && !m.startsWith(prefix) ? prefix + m : m;
}

class SandboxError extends Error {
  constructor(message, options, cause) {
    const a = errorArgs(message, options, cause, false);
    super(a.message === undefined ? '' : String(a.message));
    this.name = 'SandboxError';
    this.provider = a.provider;
    if (a.cause !== undefined) this.cause = a.cause;
  }
}
class SandboxUnavailableError extends SandboxError {
  constructor(message, options, cause) {
    const a = errorArgs(message, options, cause, true);
    super(withPrefix(`Sandbox provider "${a.provider === undefined ? 'unknown' : a.provider}" unavailable: `,
      a.message), { provider: a.provider, cause: a.cause });
    this.name = 'SandboxUnavailableError';
  }
}
class SandboxPolicyError extends SandboxError {
  constructor(message, options, cause) {
    const a = errorArgs(message, options, cause, true);
    super(withPrefix('Sandbox policy violation: ', a.message), { provider: a.provider, cause: a.cause });
    this.name = 'SandboxPolicyError';
  }
}
class SandboxConfigError extends SandboxError {
  constructor(message, options, cause) {
    const a = errorArgs(message, options, cause, true);
    super(withPrefix('Sandbox configuration error: ', a.message), { provider: a.provider, cause: a.cause });
    this.name = 'SandboxConfigError';
  }
}

// A session's errors (docs/SESSIONS.md, "Statuses"): moat's own, no aistack counterpart, no
// prefix. `sessionId` names the session (the caller's own id; never logged by moat).
class SessionBusyError extends SandboxError {
  constructor(message, options, cause) {
    super(message, options, cause);
    this.name = 'SessionBusyError';
  }
}
class SessionGoneError extends SandboxError {
  constructor(message, options, cause) {
    super(message, options, cause);
    this.name = 'SessionGoneError';
    // why the session is no longer live: the service's message ("the session was killed:
    // memory limit exceeded (256 MiB)"), or what the client knows ("closed by this client")
    const o = options && typeof options === 'object' ? options : {};
    this.reason = o.reason !== undefined ? String(o.reason) : this.message;
  }
}
class SessionNotFoundError extends SandboxError {
  constructor(message, options, cause) {
    super(message, options, cause);
    this.name = 'SessionNotFoundError';
  }
}

const ERROR_CLASSES = {
  SandboxUnavailableError, SandboxPolicyError, SandboxConfigError, SandboxError,
};
const PROVIDERS = ['native', 'docker', 'e2b', 'daytona', 'none'];
// Keys only this client understands: never written to moat's config file.
const CLIENT_KEYS = new Set(['moatPath', 'deadlineGraceMs', 'configPath', 'url', 'socketPath', 'token',
  'service']);
// API keys travel to moat through its environment, never through a file.
const KEY_ENV = { e2bApiKey: 'E2B_API_KEY', daytonaApiKey: 'DAYTONA_API_KEY' };
const REQUEST_KEYS = ['language', 'timeout', 'env', 'files', 'stdin', 'network', 'memoryMb',
  'cpus', 'pidsLimit', 'strictLimits', 'maxOutputBytes', 'allowedHosts', 'outputs',
  'sandboxId', 'kvEnabled'];
const DEFAULT_TIMEOUT = 30000;
// aistack's DEFAULT_SANDBOX_CONFIG (src/sandbox/index.ts upstream), filled in for every key
// the config leaves out, except `provider`: moat's default is 'native' (a run that IS
// sandboxed), aistack's is 'none' (refuse). memoryMb, cpus and pidsLimit are aistack's
// "Docker only" limits: here they bind the providers that enforce limits (native, docker);
// e2b and daytona do not apply them, so they are not sent there. Filled in for `moat exec`
// only: a moat serve applies its own serve.defaults.
const DEFAULT_SANDBOX_CONFIG = Object.freeze({
  provider: 'native', timeout: DEFAULT_TIMEOUT, memoryMb: 512, cpus: 1, pidsLimit: 100, network: false,
});
const LIMIT_KEYS = ['memoryMb', 'cpus', 'pidsLimit'];
const LIMITED_PROVIDERS = new Set(['native', 'docker']);
const LANGUAGES = ['python', 'javascript', 'typescript', 'bash', 'sh'];
// the other names moat's request accepts (src/core/lang.c), case-sensitive as there
const LANGUAGE_ALIASES = ['py', 'python3', 'js', 'node', 'ts', 'shell'];
// How long past the sandbox timeout the client waits for moat itself: remote
// providers also create and delete a sandbox, which takes longer.
const DEFAULT_GRACE = { native: 5000, docker: 20000, e2b: 180000, daytona: 300000, none: 5000 };
const KILL_WAIT_MS = 2000;
// The config keys moat exec reads as request defaults; a service gets them in every request.
const DEFAULT_KEYS = ['timeout', 'memoryMb', 'cpus', 'pidsLimit', 'network', 'strictLimits',
  'maxOutputBytes'];
// An idle keep-alive connection is closed by the client after this long, well before the
// service's own idle timeout (--client-timeout, default 15 s), so that a request is never
// written to a connection the service is closing at that moment.
const FREE_SOCKET_MS = 1000;

// The run-wide defaults for this provider: DEFAULT_SANDBOX_CONFIG under the config's keys.
function withDefaults(cfg, provider) {
  const out = {};
  for (const k of ['timeout', 'network', ...LIMIT_KEYS]) {
    if (LIMIT_KEYS.includes(k) && !LIMITED_PROVIDERS.has(provider)) continue;
    out[k] = DEFAULT_SANDBOX_CONFIG[k];
  }
  for (const [k, v] of Object.entries(cfg)) if (v !== undefined) out[k] = v;
  return out;
}

// The user's service (moat.socket, docs/SERVE.md "Socket activation"), tried first by a
// sandbox without url/socketPath: { path } to try, or { why } (the warning each run then
// carries; none: opted out). The config keys a request carries (the rest of a config, a
// policy or a configPath, only `moat exec` reads: such a sandbox does not use the service).
const SERVICE_KEYS = new Set([...DEFAULT_KEYS, 'provider', 'moatPath', 'deadlineGraceMs', 'service']);
function userService(cfg, provider) {
  const opt = cfg.service === undefined ? true : cfg.service;
  if (typeof opt !== 'boolean') throw new SandboxConfigError('service must be true or false', { provider });
  const env = String(process.env.MOAT_SERVICE || '').trim().toLowerCase();
  if (!opt || ['off', '0', 'false', 'no'].includes(env) || provider !== 'native') return {};
  let p = process.env.MOAT_SOCKET;
  if (!p) {
    const xdg = process.env.XDG_RUNTIME_DIR;
    if (!xdg || !xdg.startsWith('/')) {
      return { why: 'no user service (XDG_RUNTIME_DIR is not set): ran with moat exec, cold; ' +
        'MOAT_SERVICE=off says nothing' };
    }
    p = path.join(xdg, 'moat.sock');
  }
  const extra = Object.keys(cfg).filter((k) => cfg[k] !== undefined && !SERVICE_KEYS.has(k)).sort();
  if (extra.length) {
    return { why: `the user service was not used: the config sets ${extra.join(', ')}, which only ` +
      'moat exec reads (service: false says nothing)' };
  }
  return { path: p };
}

// Why the socket at p is not taken for the user's service (the code and the result would go
// through another user's process), or undefined: this user's or root's, or nothing there yet
// (connecting then fails, and says so).
function socketNotOurs(p) {
  let st;
  try { st = fs.statSync(p); } catch { return undefined; }
  const me = process.getuid();
  if (st.uid !== me && st.uid !== 0) {
    return `the user service was not used: its socket ${p} belongs to uid ${st.uid}, not to this ` +
      `user (uid ${me}): ran with moat exec`;
  }
  return undefined;
}

// Why a run the user's service did not run goes to `moat exec`; undefined when the service
// may have run it (the error is the run's).
function fallbackReason(e, p) {
  if (e && e.notRun) {
    return `the user service at ${p} did not answer (${e.message}): ran with moat exec, cold ` +
      '(systemctl --user enable --now moat.socket starts it on demand; MOAT_SERVICE=off says nothing)';
  }
  if (e && e.status === 403 && e.errorType === 'SandboxPolicyError') {
    return `the user service at ${p} refused the request (${e.message}): ran with moat exec, ` +
      "under this client's limits";
  }
  if (e && (e.status === 429 || e.status === 503)) {
    return `the user service at ${p} was busy (${e.message}): ran with moat exec`;
  }
  return undefined;
}

// An address moat never sends a provider's API traffic to: unspecified, private (RFC 1918,
// IPv6 ULA), loopback, link-local, CGNAT, and those inside an IPv4-mapped IPv6 address.
function ipv4Refused(a) {
  const [x, y] = a.split('.').map(Number);
  return x === 0 || x === 10 || x === 127 || (x === 169 && y === 254) ||
    (x === 172 && y >= 16 && y <= 31) || (x === 192 && y === 168) || (x === 100 && y >= 64 && y <= 127);
}
function ipv6Words(a) {
  let s = a.toLowerCase();
  const v4 = s.match(/^(.*:)(\d+\.\d+\.\d+\.\d+)$/);
  if (v4) {
    const [p, q, r, t] = v4[2].split('.').map(Number);
    s = `${v4[1]}${((p << 8) | q).toString(16)}:${((r << 8) | t).toString(16)}`;
  }
  const [head, tail] = s.includes('::') ? s.split('::') : [s, null];
  const h = head ? head.split(':') : [];
  const t = tail ? tail.split(':') : [];
  const fill = tail === null ? [] : new Array(8 - h.length - t.length).fill('0');
  return [...h, ...fill, ...t].map((w) => parseInt(w, 16));
}
function addressRefused(a) {
  const v = net.isIP(a);
  if (v === 4) return ipv4Refused(a);
  if (v !== 6) return false;
  const w = ipv6Words(a);
  if (w.slice(0, 5).every((x) => x === 0) && w[5] === 0xffff) {
    return ipv4Refused(`${w[6] >> 8}.${w[6] & 255}.${w[7] >> 8}.${w[7] & 255}`);
  }
  if (w.slice(0, 7).every((x) => x === 0) && (w[7] === 0 || w[7] === 1)) return true;
  return (w[0] & 0xffc0) === 0xfe80 || (w[0] & 0xfe00) === 0xfc00;
}

// aistack's construction-time checks of daytonaApiUrl (validateDaytonaApiUrlSync in
// src/sandbox/daytona.ts upstream): https only, a host, not an IP literal in a refused
// range, not `localhost` or `*.localhost`. A name that resolves to a refused address is
// moat's to refuse at the first run (a SandboxConfigError too). The message never repeats
// the URL (it may carry credentials).
function checkDaytonaUrl(raw) {
  const bad = (why) => new SandboxConfigError(`daytonaApiUrl ${why}`, { provider: 'daytona' });
  if (typeof raw !== 'string') throw bad('must be a string');
  let u;
  try { u = new URL(raw); } catch { throw bad('is not a valid URL'); }
  if (u.protocol !== 'https:') throw bad(`must use https:// (got "${u.protocol.slice(0, 20)}")`);
  const host = u.hostname.replace(/^\[(.*)\]$/, '$1');
  if (!host) throw bad('has no host');
  if (net.isIP(host) && addressRefused(host)) {
    throw bad(`host ${host} is in a private, loopback or link-local range: refused (SSRF guard)`);
  }
  const name = host.toLowerCase();
  if (name === 'localhost' || name.endsWith('.localhost')) {
    throw bad(`host "${name.slice(0, 100)}" is a loopback name: refused (SSRF guard)`);
  }
}

function createSandbox(cfg) {
  if (cfg === undefined || cfg === null) cfg = {};
  if (typeof cfg !== 'object' || Array.isArray(cfg)) {
    throw new SandboxConfigError('createSandbox(cfg): cfg must be an object');
  }
  const provider = cfg.provider === undefined ? 'native' : cfg.provider;
  if (!PROVIDERS.includes(provider)) {
    throw new SandboxConfigError(
      `unknown provider ${JSON.stringify(provider)} (${PROVIDERS.join(', ')})`, { provider });
  }
  if (provider === 'daytona' && cfg.daytonaApiUrl !== undefined) checkDaytonaUrl(cfg.daytonaApiUrl);
  const moat = cfg.moatPath || process.env.MOAT_BIN || 'moat';
  const grace = cfg.deadlineGraceMs === undefined ? DEFAULT_GRACE[provider] : cfg.deadlineGraceMs;
  if (typeof grace !== 'number' || !(grace >= 0)) {
    throw new SandboxConfigError('deadlineGraceMs must be a number >= 0', { provider });
  }
  const service = cfg.url !== undefined || cfg.socketPath !== undefined;
  // A moat serve applies its operator's defaults (serve.defaults) to what a request leaves
  // out and never runs without limits; only a `moat exec` needs aistack's filled in.
  if (service) return createServiceSandbox(cfg, provider, grace);
  const usvcAt = userService(cfg, provider);
  cfg = withDefaults(cfg, provider);
  // the user's service gets this client's defaults in every request, as moat exec applies them
  let usvc = null;
  if (usvcAt.path) {
    const svcCfg = { socketPath: usvcAt.path };
    for (const k of DEFAULT_KEYS) if (cfg[k] !== undefined) svcCfg[k] = cfg[k];
    usvc = createServiceSandbox(svcCfg, provider, grace);
  }
  if (cfg.token !== undefined) {
    throw new SandboxConfigError('token needs url or socketPath (a moat serve to send it to)',
      { provider });
  }
  const keyEnv = {};
  const moatCfg = {};
  for (const [k, v] of Object.entries(cfg)) {
    if (v === undefined || CLIENT_KEYS.has(k)) continue;
    if (KEY_ENV[k]) keyEnv[KEY_ENV[k]] = String(v);
    else moatCfg[k] = v;
  }
  let dir = null;
  let configFile = cfg.configPath || null;
  if (!configFile) {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'moat-client-'));
    configFile = path.join(dir, 'moat.json');
    fs.writeFileSync(configFile, JSON.stringify(moatCfg), { mode: 0o600 });
  }
  const children = new Set();
  let disposed = false;

  async function run(code, opts = {}) {
    let why = usvcAt.why;
    if (usvc) why = socketNotOurs(usvcAt.path);
    if (usvc && !why && !disposed && typeof code === 'string') {
      try {
        return await usvc.run(code, opts);
      } catch (e) {
        why = fallbackReason(e, usvcAt.path);
        if (why === undefined) throw e;
      }
    }
    const result = await runExec(code, opts);
    if (why) result.warnings = [...(Array.isArray(result.warnings) ? result.warnings : []), why];
    return result;
  }

  function runExec(code, opts = {}) {
    if (disposed) return Promise.reject(new SandboxError('sandbox disposed', { provider }));
    if (typeof code !== 'string') {
      return Promise.reject(new SandboxConfigError('code must be a string', { provider }));
    }
    if (provider === 'none') {
      return Promise.reject(new SandboxPolicyError(
        'sandboxing is disabled (provider "none"): refusing to run code', { provider }));
    }
    const unsupported = languageRefused(opts, provider);
    if (unsupported) return Promise.reject(unsupported);
    const cb = streamCallbacks(opts, provider);
    if (cb && cb.error) return Promise.reject(cb.error);
    const request = { code };
    for (const k of REQUEST_KEYS) if (opts[k] !== undefined) request[k] = opts[k];
    const notText = bytesRefused(request, provider);
    if (notText) return Promise.reject(notText);
    const timeout = typeof request.timeout === 'number' ? request.timeout
      : typeof cfg.timeout === 'number' ? cfg.timeout : DEFAULT_TIMEOUT;
    const deadline = timeout + grace;
    const started = Date.now();

    return new Promise((resolve, reject) => {
      let child;
      try {
        const args = ['exec', '--provider', provider, '--config', configFile];
        if (cb) args.push('--stream'); // lines as the program writes (onStdout/onStderr)
        child = spawn(moat, args, {
          stdio: ['pipe', 'pipe', 'pipe'],
          env: { ...process.env, ...keyEnv },
        });
      } catch (e) {
        reject(new SandboxUnavailableError(`cannot start moat (${moat}): ${e.message}`, { provider }));
        return;
      }
      children.add(child);
      const out = [];
      const err = [];
      let settled = false;
      let killTimer = null;
      const finish = (fn, value) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        children.delete(child);
        fn(value);
      };
      // moat enforces the sandbox timeout itself; this deadline only fires
      // when moat does not answer at all. SIGTERM first (moat then removes a
      // docker container), SIGKILL after KILL_WAIT_MS.
      const timer = setTimeout(() => {
        child.kill('SIGTERM');
        killTimer = setTimeout(() => child.kill('SIGKILL'), KILL_WAIT_MS);
        killTimer.unref();
        finish(reject, new SandboxUnavailableError(
          `moat did not answer within ${deadline} ms (sandbox timeout ${timeout} ms + ${grace} ms); killed it`,
          { provider }));
      }, deadline);
      const lines = cb && lineReader(cb, (e) => {
        child.kill('SIGTERM');
        finish(reject, e);
      });
      child.stdout.on('data', (d) => (lines ? lines.push(d) : out.push(d)));
      child.stderr.on('data', (d) => { if (err.length < 64) err.push(d); });
      child.stdin.on('error', () => {}); // moat may exit before reading everything
      child.on('error', (e) => {
        finish(reject, new SandboxUnavailableError(
          e.code === 'ENOENT' ? `moat binary not found (${moat}); install moat or set moatPath`
            : `cannot run moat (${moat}): ${e.message}`, { provider }));
      });
      child.on('close', (status, signal) => {
        if (killTimer && status !== null) clearTimeout(killTimer);
        let json;
        try {
          json = lines ? lines.result() || lines.state.error : JSON.parse(Buffer.concat(out).toString('utf8'));
          if (json === undefined) throw new Error('no result line');
        } catch {
          const stderr = Buffer.concat(err).toString('utf8').slice(0, 500).trim();
          finish(reject, new SandboxUnavailableError(
            `moat exited (${signal || status}) without a JSON answer${stderr ? `: ${stderr}` : ''}`,
            { provider }));
          return;
        }
        if (json && json.error) {
          const Cls = ERROR_CLASSES[json.error.type] || SandboxError;
          finish(reject, new Cls(String(json.error.message), { provider: json.error.provider || provider }));
          return;
        }
        if (!json || typeof json !== 'object') {
          finish(reject, new SandboxUnavailableError('moat answered with something that is not a result',
            { provider }));
          return;
        }
        if (typeof json.durationMs !== 'number') json.durationMs = Date.now() - started;
        finish(resolve, json);
      });
      child.stdin.end(JSON.stringify(request));
    });
  }

  async function dispose() {
    if (disposed) return;
    disposed = true;
    if (usvc) await usvc.dispose();
    for (const c of children) c.kill('SIGTERM');
    if (dir) fs.rmSync(dir, { recursive: true, force: true });
  }

  function session() {
    return Promise.reject(new SandboxConfigError(
      'sessions need a moat serve: give url or socketPath (docs/SESSIONS.md)', { provider }));
  }

  return { provider, run, session, dispose };
}

// A language moat does not run is refused by policy, as by every aistack adapter (the
// LANGUAGE_IMAGE lookups of src/sandbox/{docker,e2b,daytona}.ts upstream).
// Bytes (a Buffer, a typed array) where the request takes text: the client's own
// SandboxConfigError naming the field, before JSON.stringify would send
// {"type":"Buffer","data":[...]} for moat to refuse as some object. null when all is text.
const TEXT_KEYS = ['stdin', 'env', 'files', 'outputs', 'allowedHosts', 'allowedCidrs', 'sandboxId'];
function isBytes(v) {
  return v instanceof ArrayBuffer || ArrayBuffer.isView(v);
}
function bytesRefused(request, provider) {
  const refuse = (where) => new SandboxConfigError(
    `${where} must be text (a string), not bytes: decode it first (buf.toString('utf8'))`, { provider });
  for (const k of TEXT_KEYS) {
    const v = request[k];
    if (v === undefined || v === null) continue;
    if (isBytes(v)) return refuse(k);
    if (Array.isArray(v)) {
      const i = v.findIndex(isBytes);
      if (i >= 0) return refuse(`${k}[${i}]`);
    } else if (typeof v === 'object') {
      const name = Object.keys(v).find((n) => isBytes(v[n]));
      if (name !== undefined) return refuse(`${k}[${JSON.stringify(name).slice(0, 60)}]`);
    }
  }
  return null;
}

function languageRefused(opts, provider) {
  if (!opts || opts.language === undefined || LANGUAGES.includes(opts.language) ||
      LANGUAGE_ALIASES.includes(opts.language)) return null;
  const shown = typeof opts.language === 'string' ? opts.language.slice(0, 40) : typeof opts.language;
  return new SandboxPolicyError(`unsupported language: ${shown} (${LANGUAGES.join(', ')})`, { provider });
}

// ---- streamed results (docs/SERVE.md, "Streaming") ----------------------------------

// The onStdout/onStderr of opts: undefined (no streaming), or the error of a bad one.
function streamCallbacks(opts, provider) {
  const cb = { onStdout: opts.onStdout, onStderr: opts.onStderr };
  for (const [k, f] of Object.entries(cb)) {
    if (f !== undefined && typeof f !== 'function') {
      return { error: new SandboxConfigError(`${k} must be a function`, { provider }) };
    }
  }
  return cb.onStdout || cb.onStderr ? cb : undefined;
}

// Reads NDJSON lines (moat exec --stream's stdout, a streamed /v1/run body) as they come:
// each stdout/stderr chunk goes to its callback as a string (base64 chunks decoded as UTF-8
// with U+FFFD for what is not) and is kept, so that the final result carries the whole text
// as an unstreamed one would. A callback that throws ends the run (fail(err)).
function lineReader(cb, fail) {
  let pending = Buffer.alloc(0);
  const kept = { stdout: [], stderr: [] };
  const state = { result: undefined, error: undefined, bad: false };
  function line(buf) {
    let obj;
    try { obj = JSON.parse(buf.toString('utf8')); } catch { state.bad = true; return; }
    if (!obj || typeof obj !== 'object') { state.bad = true; return; }
    if (obj.error && obj.type === undefined) { state.error = obj; return; }
    if (obj.type === 'result') { state.result = obj; return; }
    if ((obj.type !== 'stdout' && obj.type !== 'stderr') || typeof obj.data !== 'string') return;
    const bytes = obj.encoding === 'base64' ? Buffer.from(obj.data, 'base64') : Buffer.from(obj.data, 'utf8');
    kept[obj.type].push(bytes);
    const f = obj.type === 'stdout' ? cb.onStdout : cb.onStderr;
    if (!f) return;
    try {
      f(obj.encoding === 'base64' ? bytes.toString('utf8') : obj.data);
    } catch (e) {
      fail(e);
    }
  }
  return {
    state,
    push(d) {
      pending = pending.length ? Buffer.concat([pending, d]) : d;
      let i;
      while ((i = pending.indexOf(10)) >= 0) {
        line(pending.subarray(0, i));
        pending = pending.subarray(i + 1);
      }
    },
    // The result line as the unstreamed result: the text put back, type/streamed gone.
    result() {
      if (pending.length) line(pending);
      pending = Buffer.alloc(0);
      const r = state.result;
      if (!r) return undefined;
      delete r.type;
      delete r.streamed;
      r.stdout = Buffer.concat(kept.stdout).toString('utf8');
      r.stderr = Buffer.concat(kept.stderr).toString('utf8');
      return r;
    },
  };
}

// ---- moat serve: POST /v1/run --------------------------------------------------------

// Where the service is and how to reach it; every problem is a SandboxConfigError. Messages
// name at most the scheme, host and port (`where`), never the token nor a rejected url.
function serviceTarget(cfg, provider) {
  const bad = (msg) => new SandboxConfigError(msg, { provider });
  if (provider !== 'native') {
    throw bad(`url/socketPath: moat serve runs the native provider only, not ${JSON.stringify(provider)}`);
  }
  if (cfg.url !== undefined && cfg.socketPath !== undefined) {
    throw bad('url and socketPath are exclusive: give one');
  }
  if (cfg.token !== undefined &&
      (typeof cfg.token !== 'string' || !/^[\x21-\x7e]+$/.test(cfg.token))) {
    throw bad('token must be a non-empty string of printable ASCII without spaces');
  }
  if (cfg.socketPath !== undefined) {
    if (typeof cfg.socketPath !== 'string' || cfg.socketPath === '' || cfg.socketPath.includes('\0')) {
      throw bad('socketPath must be a non-empty string (the path of the service\'s unix socket)');
    }
    return { mod: http, where: `unix:${cfg.socketPath}`, options: { socketPath: cfg.socketPath },
      base: '' };
  }
  if (typeof cfg.url !== 'string') throw bad('url must be a string such as "http://127.0.0.1:3000"');
  let u;
  try { u = new URL(cfg.url); } catch { throw bad('url is not a valid URL (e.g. "http://127.0.0.1:3000")'); }
  if (u.protocol !== 'http:' && u.protocol !== 'https:') {
    throw bad(`url must be http:// or https://, not ${u.protocol.slice(0, 20)}//`);
  }
  if (u.username || u.password) throw bad('url must not carry credentials: use the token option');
  if (u.search || u.hash) throw bad('url must not have a query or a fragment');
  const hostname = u.hostname.replace(/^\[(.*)\]$/, '$1');
  const base = u.pathname.replace(/\/+$/, '');
  return {
    mod: u.protocol === 'https:' ? https : http,
    where: `${u.protocol}//${u.host}`,
    options: { hostname, port: u.port || (u.protocol === 'https:' ? 443 : 80) },
    base,
  };
}

// Retry-After: delay-seconds or an HTTP date → ms (undefined when absent or unreadable).
function retryAfterMs(value) {
  if (typeof value !== 'string' || value.trim() === '') return undefined;
  if (/^\s*\d+\s*$/.test(value)) return Number(value) * 1000;
  const t = Date.parse(value);
  return Number.isNaN(t) ? undefined : Math.max(0, t - Date.now());
}

// An HTTP answer that is not a result → the contract's error classes. A known `type` wins;
// otherwise the status decides: the request or the client's setup is wrong (400, 401 bad or
// missing token, 404/405 url is not a moat serve) → SandboxConfigError; refused by the
// service's policy or size limits (403, 413) → SandboxPolicyError; the service cannot run it
// now (429, 5xx: ServerBusy, shutting down, cannot isolate, not implemented) →
// SandboxUnavailableError, with retryAfterMs when the service sent Retry-After.
const TYPED = {
  SandboxConfigError, SandboxPolicyError, SandboxUnavailableError,
  SessionBusy: SessionBusyError, SessionGone: SessionGoneError, SessionNotFound: SessionNotFoundError,
};
function serviceError(status, json, headers, ctx) {
  const info = json && typeof json === 'object' && json.error && typeof json.error === 'object'
    ? json.error : null;
  const type = info && typeof info.type === 'string' ? info.type : undefined;
  let message = info && info.message !== undefined && info.message !== null
    ? String(info.message) : `moat serve answered HTTP ${status} without an error object`;
  let Cls;
  if (type && Object.prototype.hasOwnProperty.call(TYPED, type)) Cls = TYPED[type];
  // a session route: 409 and 410 are the session's whatever the type; a 404 without a type
  // is the session's too (the service's own "no such route" carries NotFound)
  else if (ctx.sessionId && status === 409) Cls = SessionBusyError;
  else if (ctx.sessionId && status === 410) Cls = SessionGoneError;
  else if (ctx.sessionId && status === 404 && !type) Cls = SessionNotFoundError;
  else if (status === 400 || status === 401 || status === 404 || status === 405) Cls = SandboxConfigError;
  else if (status === 403 || status === 413) Cls = SandboxPolicyError;
  else if (status === 429 || status >= 500) Cls = SandboxUnavailableError;
  else Cls = SandboxError;
  if (status === 401) message += ctx.hasToken ? ' (the token was refused)' : ' (no token configured: set token)';
  if ((status === 404 || status === 405) && Cls === SandboxConfigError) {
    message += ` (${ctx.method} ${ctx.path} at ${ctx.where}: is this a moat serve` +
      `${ctx.session ? ' with sessions on (--max-sessions 0 turns them off)' : ''}?)`;
  }
  const provider = info && typeof info.provider === 'string' ? info.provider : ctx.provider;
  const opts = { provider };
  if (Cls === SessionGoneError && info && typeof info.reason === 'string') opts.reason = info.reason;
  const err = new Cls(message, opts);
  err.status = status;
  if (type) err.errorType = type;
  if (ctx.sessionId) err.sessionId = ctx.sessionId;
  const after = retryAfterMs(headers['retry-after']);
  if (after !== undefined) err.retryAfterMs = after;
  return err;
}

// ---- sessions (docs/SESSIONS.md) ------------------------------------------------------

// session(opts)'s keys, all sent as they are; the config's limits folded in as for a run
const SESSION_KEYS = ['language', 'sandboxId', 'kvEnabled', 'memoryMb', 'cpus', 'pidsLimit',
  'strictLimits', 'maxOutputBytes', 'env', 'network', 'allowedHosts', 'idleTimeoutMs',
  'maxLifetimeMs'];
const SESSION_DEFAULT_KEYS = DEFAULT_KEYS.filter((k) => k !== 'timeout');
// a session's run(code, opts)
const SESSION_RUN_KEYS = ['stdin', 'files', 'timeout', 'onStdout', 'onStderr'];
const SESSION_LANGUAGES = ['python', 'javascript', 'py', 'python3', 'js', 'node'];
// what the client puts in a URL path: the service's ids are `ses_<node>_` + 32 hex digits
const SESSION_ID = /^[A-Za-z0-9_-]{1,128}$/;

// The client-side refusals of session(opts), before any request: a SandboxConfigError (a
// language moat does not run at all: SandboxPolicyError, as for run).
function sessionRequest(opts, cfg, provider) {
  const bad = (msg) => new SandboxConfigError(msg, { provider });
  if (opts === undefined || opts === null) opts = {};
  if (typeof opts !== 'object' || Array.isArray(opts)) throw bad('session(opts): opts must be an object');
  for (const k of Object.keys(opts)) {
    if (!SESSION_KEYS.includes(k)) throw bad(`session(opts): unknown option ${JSON.stringify(k).slice(0, 60)}`);
  }
  if (opts.language !== undefined && !SESSION_LANGUAGES.includes(opts.language)) {
    const refused = languageRefused(opts, provider);
    if (refused) throw refused;
    throw bad(`sessions take python or javascript, not ${opts.language}`);
  }
  for (const k of ['idleTimeoutMs', 'maxLifetimeMs']) {
    if (opts[k] !== undefined && !(Number.isInteger(opts[k]) && opts[k] > 0)) {
      throw bad(`${k} must be a whole number of ms > 0`);
    }
  }
  const request = {};
  for (const k of SESSION_DEFAULT_KEYS) if (cfg[k] !== undefined) request[k] = cfg[k];
  for (const k of SESSION_KEYS) if (opts[k] !== undefined) request[k] = opts[k];
  const notText = bytesRefused(request, provider);
  if (notText) throw notText;
  return request;
}

// A step's rich results (docs/SESSIONS.md, "Results") read under E2B's names: `text`,
// `html`, `markdown`, `svg`, `png`, `jpeg` (base64 text), `latex`, `json`, `javascript`,
// `isMainResult`, `formats()`; getters that are not enumerable, so the result's JSON is the
// service's as it was. `mainResult`: the last expression's, or undefined.
const RESULT_MIME = {
  text: 'text/plain', html: 'text/html', markdown: 'text/markdown', svg: 'image/svg+xml',
  png: 'image/png', jpeg: 'image/jpeg', latex: 'text/latex', json: 'application/json',
  javascript: 'application/javascript',
};
// One result so read (a session step's, a code context's: live.js).
function richResult(r) {
  const data = r.data && typeof r.data === 'object' ? r.data : {};
  for (const [name, mime] of Object.entries(RESULT_MIME)) {
    Object.defineProperty(r, name, { get: () => data[mime], enumerable: false });
  }
  Object.defineProperty(r, 'isMainResult', { get: () => r.isMain === true, enumerable: false });
  Object.defineProperty(r, 'formats', {
    value: () => Object.keys(RESULT_MIME).filter((n) => RESULT_MIME[n] in data), enumerable: false,
  });
  return r;
}
function withResults(res) {
  if (!res || !Array.isArray(res.results)) return res;
  for (const r of res.results) {
    if (r && typeof r === 'object') richResult(r);
  }
  Object.defineProperty(res, 'mainResult', {
    get: () => res.results.find((r) => r && r.isMain === true), enumerable: false,
  });
  return res;
}

// The checks of a session's run(code, opts); the request and its callbacks.
function sessionRunRequest(code, opts, cfg, provider) {
  const bad = (msg) => new SandboxConfigError(msg, { provider });
  if (typeof code !== 'string') throw bad('code must be a string');
  if (opts === undefined || opts === null) opts = {};
  if (typeof opts !== 'object' || Array.isArray(opts)) throw bad('session.run(code, opts): opts must be an object');
  for (const k of Object.keys(opts)) {
    if (!SESSION_RUN_KEYS.includes(k)) {
      throw bad(`session.run(code, opts): unknown option ${JSON.stringify(k).slice(0, 60)}` +
        ' (a session\'s limits, env and language are set at session())');
    }
  }
  if (opts.stdin !== undefined && typeof opts.stdin !== 'string') throw bad('stdin must be a string');
  if (opts.files !== undefined && (opts.files === null || typeof opts.files !== 'object' || Array.isArray(opts.files))) {
    throw bad('files must be an object of path → content');
  }
  if (opts.timeout !== undefined && !(typeof opts.timeout === 'number' && opts.timeout > 0)) {
    throw bad('timeout must be a number of ms > 0');
  }
  const cb = streamCallbacks(opts, provider);
  if (cb && cb.error) throw cb.error;
  const request = { code };
  if (cfg.timeout !== undefined) request.timeout = cfg.timeout;
  for (const k of ['stdin', 'files', 'timeout']) if (opts[k] !== undefined) request[k] = opts[k];
  const notText = bytesRefused(request, provider);
  if (notText) throw notText;
  return { request, cb };
}

function createServiceSandbox(cfg, provider, grace) {
  const target = serviceTarget(cfg, provider);
  const token = cfg.token;
  const agent = new target.mod.Agent({ keepAlive: true, timeout: FREE_SOCKET_MS });
  const inflight = new Set();
  const sessions = new Set(); // open sessions, closed by dispose()
  let disposed = false;

  // One exchange with the service: METHOD base+route with a JSON body (or none), the answer's
  // JSON. With `cb` the answer is asked for as NDJSON and the output goes to the callbacks.
  // A session run's 200 answer may carry `error` (the step's exception): it is the result.
  function call(method, route, payload, { cb, timeout, sessionId, session, okStatus = 200 }) {
    const deadline = timeout + grace;
    const body = payload === undefined ? null : Buffer.from(JSON.stringify(payload), 'utf8');
    const path = target.base + route;
    const headers = {
      // with a callback: the output as it comes, one JSON line a chunk
      Accept: cb ? 'application/x-ndjson' : 'application/json',
    };
    if (body) {
      headers['Content-Type'] = 'application/json';
      headers['Content-Length'] = String(body.length);
    }
    if (token !== undefined) headers.Authorization = `Bearer ${token}`;
    const ctx = { provider, where: target.where, method, path: target.base + (session ? '/v1/sessions' : route),
      hasToken: token !== undefined, sessionId, session };

    return new Promise((resolve, reject) => {
      let settled = false;
      let req;
      const entry = { abort: null };
      const finish = (fn, value) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        inflight.delete(entry);
        fn(value);
      };
      entry.abort = (err) => { finish(reject, err); req.destroy(); };
      // The service enforces the sandbox timeout itself (a normal result with timedOut);
      // this deadline only fires when it does not answer at all.
      const timer = setTimeout(() => entry.abort(new SandboxUnavailableError(
        `moat serve did not answer within ${deadline} ms (sandbox timeout ${timeout} ms + ${grace} ms); aborted the request`,
        { provider })), deadline);
      try {
        req = target.mod.request({ ...target.options, method, path, headers, agent });
      } catch (e) {
        clearTimeout(timer);
        reject(new SandboxUnavailableError(`cannot call moat serve at ${target.where}: ${e.message}`,
          { provider }));
        return;
      }
      inflight.add(entry);
      req.on('error', (e) => {
        const err = new SandboxUnavailableError(`cannot reach moat serve at ${target.where}: ${e.message}`,
          { provider });
        if (e && e.syscall === 'connect') err.notRun = true; // nothing was sent
        finish(reject, err);
      });
      req.on('response', (res) => {
        const chunks = [];
        // errors found before the run come as one JSON object, the stream only with a 200
        const lines = cb && res.statusCode === 200 &&
          /^application\/x-ndjson/i.test(res.headers['content-type'] || '') &&
          lineReader(cb, (e) => entry.abort(e));
        res.on('data', (d) => (lines ? lines.push(d) : chunks.push(d)));
        const cut = () => finish(reject, new SandboxUnavailableError(
          `moat serve at ${target.where} closed the connection before the whole answer`, { provider }));
        res.on('error', cut);
        res.on('aborted', cut);
        res.on('end', () => {
          if (!res.complete) { cut(); return; }
          let json;
          if (lines) {
            json = lines.result();
            if (!json) { cut(); return; }
          } else {
            try { json = JSON.parse(Buffer.concat(chunks).toString('utf8')); } catch { json = undefined; }
          }
          if (res.statusCode !== okStatus ||
              (!session && json && typeof json === 'object' && json.error)) {
            finish(reject, serviceError(res.statusCode, json, res.headers, ctx));
            return;
          }
          if (!json || typeof json !== 'object' || Array.isArray(json)) {
            finish(reject, new SandboxUnavailableError(
              'moat serve answered with something that is not a result', { provider }));
            return;
          }
          finish(resolve, json);
        });
      });
      req.end(body || undefined);
    });
  }

  function filled(json, started) {
    if (typeof json.durationMs !== 'number') json.durationMs = Date.now() - started;
    if (json.provider === undefined) json.provider = provider;
    return json;
  }

  function run(code, opts) {
    if (disposed) return Promise.reject(new SandboxError('sandbox disposed', { provider }));
    if (typeof code !== 'string') {
      return Promise.reject(new SandboxConfigError('code must be a string', { provider }));
    }
    if (opts === undefined || opts === null) opts = {};
    if (typeof opts !== 'object' || Array.isArray(opts)) {
      return Promise.reject(new SandboxConfigError('run(code, opts): opts must be an object', { provider }));
    }
    const unsupported = languageRefused(opts, provider);
    if (unsupported) return Promise.reject(unsupported);
    const cb = streamCallbacks(opts, provider);
    if (cb && cb.error) return Promise.reject(cb.error);
    const request = { code };
    for (const k of DEFAULT_KEYS) if (cfg[k] !== undefined) request[k] = cfg[k];
    for (const k of REQUEST_KEYS) if (opts[k] !== undefined) request[k] = opts[k];
    const notText = bytesRefused(request, provider);
    if (notText) return Promise.reject(notText);
    const timeout = typeof request.timeout === 'number' ? request.timeout : DEFAULT_TIMEOUT;
    const started = Date.now();
    return call('POST', '/v1/run', request, { cb, timeout }).then((json) => filled(json, started));
  }

  // POST /v1/sessions → a Session (docs/SESSIONS.md, "Clients").
  async function session(opts) {
    if (disposed) throw new SandboxError('sandbox disposed', { provider });
    const request = sessionRequest(opts, cfg, provider);
    const timeout = typeof cfg.timeout === 'number' ? cfg.timeout : DEFAULT_TIMEOUT;
    const answer = await call('POST', '/v1/sessions', request, { timeout, session: true, okStatus: 201 });
    if (typeof answer.id !== 'string' || !SESSION_ID.test(answer.id)) {
      throw new SandboxUnavailableError('moat serve answered POST /v1/sessions without a session id',
        { provider });
    }
    const s = makeSession(answer);
    if (disposed) { await s.close().catch(() => {}); throw new SandboxError('sandbox disposed', { provider }); }
    return s;
  }

  function makeSession(created) {
    const id = created.id;
    const route = `/v1/sessions/${id}`;
    let closing = null; // the DELETE's promise, once close() was called
    const gone = () => new SessionGoneError('the session was closed by this client',
      { provider, reason: 'closed by this client' });
    const s = {
      id,
      language: created.language,
      expiresAt: created.expiresAt,
      created,
      run(code, opts) {
        let r;
        try {
          if (closing || disposed) throw Object.assign(gone(), { sessionId: id });
          r = sessionRunRequest(code, opts, cfg, provider);
        } catch (e) {
          return Promise.reject(e);
        }
        const timeout = typeof r.request.timeout === 'number' ? r.request.timeout : DEFAULT_TIMEOUT;
        const started = Date.now();
        return call('POST', `${route}/run`, r.request, { cb: r.cb, timeout, sessionId: id, session: true })
          .then((json) => withResults(filled(json, started)));
      },
      info() {
        if (disposed) return Promise.reject(new SandboxError('sandbox disposed', { provider }));
        return call('GET', route, undefined, { timeout: DEFAULT_TIMEOUT, sessionId: id, session: true });
      },
      // Idempotent: one DELETE; a session the service already ended (404, 410) is closed.
      close() {
        if (!closing) {
          sessions.delete(s);
          closing = call('DELETE', route, undefined, { timeout: DEFAULT_TIMEOUT, sessionId: id, session: true })
            .then(() => undefined, (e) => {
              if (e instanceof SessionGoneError || e instanceof SessionNotFoundError) return undefined;
              closing = null; // unreachable or refused: a later close() tries again
              sessions.add(s);
              throw e;
            });
        }
        return closing;
      },
    };
    sessions.add(s);
    return s;
  }

  async function dispose() {
    if (disposed) return;
    disposed = true;
    for (const e of [...inflight]) {
      e.abort(new SandboxError('sandbox disposed while the run was in flight; the request was aborted',
        { provider }));
    }
    // the sessions opened here end with it (their sandboxes are the service's memory)
    await Promise.allSettled([...sessions].map((s) => s.close()));
    agent.destroy();
  }

  return { provider, run, session, dispose };
}

// Live sandboxes (docs/SANDBOXES.md): live.js, built on this file's transport helpers.
const live = require('./live').makeLive({
  http, https, serviceTarget, serviceError, richResult, SandboxError, SandboxConfigError, SandboxUnavailableError,
});

module.exports = {
  createSandbox, DEFAULT_SANDBOX_CONFIG,
  LiveSandbox: live.LiveSandbox, SandboxNotFoundError: live.SandboxNotFoundError,
  SandboxGoneError: live.SandboxGoneError, NotFoundError: live.NotFoundError, Execution: live.Execution,
  SandboxError, SandboxUnavailableError, SandboxPolicyError, SandboxConfigError,
  SessionBusyError, SessionGoneError, SessionNotFoundError,
};
