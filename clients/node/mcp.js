#!/usr/bin/env node
'use strict';
// moat-mcp: a stdio MCP server (the official SDK, @modelcontextprotocol/sdk) giving an
// agent host one tool, run_code. The model chooses only the program and its inputs
// (language, code, stdin, files); everything else (limits, network, allowedHosts,
// kvEnabled, sandboxId, timeout) is the operator's, from --config FILE and flags, and the
// tool's input schema refuses any other argument. Runs go through this package's client:
// `moat exec` (the moat given by --moat, which `moat mcp` sets to itself), or a `moat serve`
// when the operator names one. stdout carries the protocol only; the log is stderr, one
// line per event, never the code, its inputs, its output, the sandboxId nor the token.
// docs/MCP.md.
const fs = require('node:fs');
const path = require('node:path');
const { parseArgs } = require('node:util');

// Anything printed with console.* goes to stderr: stdout is the protocol's.
for (const k of ['log', 'info', 'debug', 'warn']) console[k] = console.error;

const log = (msg) => process.stderr.write(`moat mcp: ${msg}\n`);

let sdk;
try {
  sdk = {
    McpServer: require('@modelcontextprotocol/sdk/server/mcp.js').McpServer,
    StdioServerTransport: require('@modelcontextprotocol/sdk/server/stdio.js').StdioServerTransport,
    z: require('zod').z,
  };
} catch (e) {
  if (e && e.code !== 'MODULE_NOT_FOUND') throw e;
  log(`the MCP SDK (@modelcontextprotocol/sdk, zod) is not installed beside ${__dirname}: ` +
    `run \`npm ci --omit=dev\` there (moat's package ships it under /usr/lib/moat/mcp)`);
  process.exit(3);
}
const { createSandbox, SessionGoneError, SessionNotFoundError } = require('./index.js');

const LANGUAGES = ['python', 'javascript', 'typescript', 'bash', 'sh'];
const MAX_CODE = 5 * 1024 * 1024; // moat's MOAT_MAX_CODE_BYTES
const MAX_STDIN = 5 * 1024 * 1024;
const MAX_FILES = 100;
const MAX_FILES_BYTES = 16 * 1024 * 1024;
const MAX_RESULT_TEXT = 1024 * 1024; // each stream in the text content (all in structuredContent)

// The operator's settings: the config file's keys (docs/MCP.md), in the request's names.
const CONFIG_KEYS = {
  timeout: 'number', memoryMb: 'number', cpus: 'number', pidsLimit: 'number',
  maxOutputBytes: 'number', strictLimits: 'boolean', network: 'boolean', allowedHosts: 'array',
  kvEnabled: 'boolean', sandboxId: 'string', maxConcurrent: 'number', maxQueued: 'number',
  url: 'string', socketPath: 'string', tokenFile: 'string', session: 'boolean',
  policy: 'string', rootfs: 'string', kv: 'string', kvQuota: 'string', strictIsolation: 'boolean',
};
// sent with every run (the operator's; the model cannot name them)
const REQUEST_KEYS = ['timeout', 'memoryMb', 'cpus', 'pidsLimit', 'maxOutputBytes', 'strictLimits',
  'network', 'allowedHosts', 'kvEnabled', 'sandboxId'];
// With --session (the default through a moat serve): the languages whose calls share one interpreter for the connection
// (docs/SESSIONS.md), and the operator's settings a session is made with.
const SESSION_LANGUAGES = ['python', 'javascript'];
const SESSION_KEYS = ['memoryMb', 'cpus', 'pidsLimit', 'maxOutputBytes', 'strictLimits', 'network',
  'allowedHosts', 'kvEnabled', 'sandboxId'];
// moat exec's own config (written by the client into its private config file)
const EXEC_KEYS = ['policy', 'rootfs', 'kv', 'kvQuota', 'strictIsolation'];

class UsageError extends Error {}

function usage() {
  return `usage: moat mcp [--config FILE] [options]
A stdio MCP server with one tool, run_code (language, code, stdin, files). What a run may
use is set here, never by the model:
  --config FILE        JSON settings named as in a moat request (timeout, memoryMb,
                       network, allowedHosts, ...: docs/MCP.md); flags win over it
  --timeout DURATION   wall clock per run: 500ms, 5s, 2m (plain number: seconds; default 30s)
  --memory SIZE        memory limit: 256M, 1G (plain number: MiB; default 512M)
  --cpus N             CPU share (default 1)
  --pids N             process limit (default 100)
  --max-output BYTES   capture cap per stream (default 1 MiB)
  --strict-limits      fail a run whose limits cannot all be enforced
  --net                allow network egress (default: none)
  --allowed-host ENTRY egress only to scheme://host[:port] (repeatable)
  --sandbox-id ID      the sandboxId of every run (the key-value store's scope)
  --kv-enabled         give runs the key-value store (needs --sandbox-id)
  --max-concurrent N   runs at once (default 2); --max-queued N waiting (default 16)
  --url URL | --socket PATH   run through a moat serve instead of moat exec
  --token-file FILE    that service's bearer token
  --session            python and javascript calls share one interpreter per language
                       for this connection (a moat serve session: state kept between
                       calls); the default with --url or --socket
  --one-shot           every call starts from scratch, also with --url or --socket
  --policy FILE, --rootfs DIR, --kv SPEC, --kv-quota SPEC, --strict-isolation
                       moat exec's own settings (not with --url/--socket)
`;
}

// "5s", "500ms", "2m", "1h", "5" (seconds) → ms, as moat run --timeout.
function parseDuration(s) {
  const m = /^([0-9]+(?:\.[0-9]+)?)(ms|s|m|h)?$/.exec(s);
  const mult = { ms: 1, s: 1000, m: 60000, h: 3600000 }[m ? m[2] || 's' : 's'];
  const v = m ? Math.floor(Number(m[1]) * mult) : NaN;
  if (!(v >= 1 && v <= 86400000)) throw new UsageError(`--timeout: expected a duration like 500ms, 5s or 2m, got "${s}"`);
  return v;
}
// "256M", "1G", "512" (MiB) → MiB, as moat run --memory.
function parseSize(s) {
  const m = /^([0-9]+)(M|m|MiB|G|g|GiB)?$/.exec(s);
  const v = m ? Number(m[1]) * (/^[Gg]/.test(m[2] || '') ? 1024 : 1) : NaN;
  if (!(v >= 1)) throw new UsageError(`--memory: expected a size like 256M or 1G, got "${s}"`);
  return v;
}
function parsePositive(flag, s, integer) {
  const v = Number(s);
  if (!/^[0-9.]+$/.test(s) || !(v > 0) || (integer && !Number.isInteger(v))) {
    throw new UsageError(`${flag}: expected a positive ${integer ? 'integer' : 'number'}, got "${s}"`);
  }
  return v;
}

function readConfigFile(file) {
  let text;
  try { text = fs.readFileSync(file, 'utf8'); } catch (e) {
    throw new UsageError(`--config ${file}: ${e.code === 'ENOENT' ? 'no such file' : e.message}`);
  }
  if (text.length > 1024 * 1024) throw new UsageError(`--config ${file}: larger than 1 MiB`);
  let cfg;
  try { cfg = JSON.parse(text); } catch (e) {
    throw new UsageError(`--config ${file}: not JSON (${e.message})`);
  }
  if (!cfg || typeof cfg !== 'object' || Array.isArray(cfg)) {
    throw new UsageError(`--config ${file}: must be a JSON object`);
  }
  for (const [k, v] of Object.entries(cfg)) {
    const want = CONFIG_KEYS[k];
    if (!want) throw new UsageError(`--config ${file}: "${k.slice(0, 60)}" is not a moat mcp setting`);
    const ok = want === 'array' ? Array.isArray(v) && v.every((x) => typeof x === 'string')
      : typeof v === want && (want !== 'number' || Number.isFinite(v));
    if (!ok) throw new UsageError(`--config ${file}: "${k}" must be ${want === 'array' ? 'an array of strings' : `a ${want}`}`);
    if (want === 'number' && !(v > 0 || (k === 'maxQueued' && v === 0)) ||
        (['pidsLimit', 'maxOutputBytes', 'maxConcurrent', 'maxQueued', 'timeout', 'memoryMb'].includes(k) &&
          !Number.isInteger(v))) {
      throw new UsageError(`--config ${file}: "${k}" must be a positive ${k === 'cpus' ? 'number' : 'integer'}`);
    }
  }
  return cfg;
}

// The operator's settings: the config file, then the flags over it. Throws UsageError.
function settingsFrom(argv) {
  let parsed;
  try {
    parsed = parseArgs({
      args: argv,
      strict: true,
      allowPositionals: false,
      options: {
        moat: { type: 'string' }, config: { type: 'string' }, help: { type: 'boolean', short: 'h' },
        timeout: { type: 'string' }, memory: { type: 'string' }, cpus: { type: 'string' },
        pids: { type: 'string' }, 'max-output': { type: 'string' },
        'strict-limits': { type: 'boolean' }, net: { type: 'boolean' },
        'allowed-host': { type: 'string', multiple: true }, 'sandbox-id': { type: 'string' },
        'kv-enabled': { type: 'boolean' }, 'max-concurrent': { type: 'string' },
        'max-queued': { type: 'string' }, url: { type: 'string' }, socket: { type: 'string' },
        'token-file': { type: 'string' }, session: { type: 'boolean' }, 'one-shot': { type: 'boolean' },
        policy: { type: 'string' }, rootfs: { type: 'string' },
        kv: { type: 'string' }, 'kv-quota': { type: 'string' }, 'strict-isolation': { type: 'boolean' },
      },
    });
  } catch (e) {
    throw new UsageError(e.message);
  }
  const o = parsed.values;
  if (o.help) return { help: true };
  const s = o.config ? readConfigFile(o.config) : {};
  const set = (k, v) => { if (v !== undefined) s[k] = v; };
  set('timeout', o.timeout === undefined ? undefined : parseDuration(o.timeout));
  set('memoryMb', o.memory === undefined ? undefined : parseSize(o.memory));
  set('cpus', o.cpus === undefined ? undefined : parsePositive('--cpus', o.cpus, false));
  set('pidsLimit', o.pids === undefined ? undefined : parsePositive('--pids', o.pids, true));
  set('maxOutputBytes', o['max-output'] === undefined ? undefined
    : parsePositive('--max-output', o['max-output'], true));
  set('maxConcurrent', o['max-concurrent'] === undefined ? undefined
    : parsePositive('--max-concurrent', o['max-concurrent'], true));
  set('maxQueued', o['max-queued'] === undefined ? undefined
    : Number.isInteger(Number(o['max-queued'])) && Number(o['max-queued']) >= 0 ? Number(o['max-queued'])
      : (() => { throw new UsageError(`--max-queued: expected an integer >= 0, got "${o['max-queued']}"`); })());
  if (o['strict-limits']) s.strictLimits = true;
  if (o.net) s.network = true;
  if (o['kv-enabled']) s.kvEnabled = true;
  if (o['strict-isolation']) s.strictIsolation = true;
  if (o.session && o['one-shot']) throw new UsageError('--session and --one-shot are exclusive');
  if (o.session) s.session = true;
  if (o['one-shot']) s.session = false;
  if (o['allowed-host']) s.allowedHosts = [...(s.allowedHosts || []), ...o['allowed-host']];
  set('sandboxId', o['sandbox-id']);
  set('url', o.url);
  set('socketPath', o.socket);
  set('tokenFile', o['token-file']);
  for (const k of ['policy', 'rootfs', 'kv']) set(k, o[k]);
  set('kvQuota', o['kv-quota']);
  s.moat = o.moat || process.env.MOAT_BIN || 'moat';
  if (s.kvEnabled && !s.sandboxId) throw new UsageError('kvEnabled needs a sandboxId (--sandbox-id ID)');
  if (s.url !== undefined && s.socketPath !== undefined) throw new UsageError('--url and --socket are exclusive');
  const service = s.url !== undefined || s.socketPath !== undefined;
  if (s.tokenFile !== undefined && !service) throw new UsageError('--token-file needs --url or --socket');
  if (s.session && !service) {
    throw new UsageError('--session needs --url or --socket (sessions are a moat serve\'s)');
  }
  // state kept between calls by default where it can be: through a moat serve
  if (s.session === undefined) s.session = service;
  if (service) {
    const exec = EXEC_KEYS.filter((k) => s[k] !== undefined);
    if (exec.length) throw new UsageError(`${exec.join(', ')}: moat exec settings; a moat serve has its own`);
  }
  return s;
}

// What the tool's description tells the model about the sandbox it gets.
function describe(s) {
  const secs = (ms) => (ms % 1000 ? `${ms} ms` : `${ms / 1000} s`);
  const parts = [`time limit ${secs(s.timeout === undefined ? 30000 : s.timeout)}`];
  const service = s.url !== undefined || s.socketPath !== undefined;
  if (s.memoryMb !== undefined || !service) parts.push(`memory ${s.memoryMb === undefined ? 512 : s.memoryMb} MiB`);
  if (s.allowedHosts && s.allowedHosts.length) parts.push(`network only to ${s.allowedHosts.join(', ')}`);
  else parts.push(s.network ? 'network access' : 'no network access');
  if (s.kvEnabled) parts.push('a key-value store (Spin\'s API) that persists between runs');
  if (s.session) {
    return 'Run code in an isolated Linux sandbox (moat) and return its output. Python and ' +
      'JavaScript calls run in one interpreter kept for this conversation, one per language, ' +
      'as cells of a notebook: variables, functions, imports and files under /sandbox stay ' +
      'from one call to the next, and the value of a last expression is returned. Other ' +
      `languages start from scratch each call. The sandbox has ${parts.join(', ')} (per call). ` +
      'The working directory is /sandbox, where `files` are written (relative paths). A call ' +
      'that runs too long is stopped and its interpreter lost, as is one that exits; the ' +
      'next call then starts a fresh one.';
  }
  return 'Run a program in a fresh, isolated Linux sandbox (moat) and return its output and ' +
    `exit code. Each call starts from scratch: ${parts.join(', ')}. The program is ` +
    '/sandbox/main.<ext>, its working directory /sandbox, where `files` are written too ' +
    '(relative paths). A program that runs too long is stopped.';
}

function buildServer(s) {
  const { McpServer, z } = sdk;
  const inputSchema = z.object({
    language: z.enum(LANGUAGES, {
      errorMap: () => ({ message: `language must be one of ${LANGUAGES.join(', ')}` }),
    }).describe('The language of `code`.'),
    code: z.string().max(MAX_CODE, `code is larger than ${MAX_CODE} bytes`)
      .describe('The program text.'),
    stdin: z.string().max(MAX_STDIN, `stdin is larger than ${MAX_STDIN} bytes`).optional()
      .describe('Standard input of the program (default: empty).'),
    files: z.record(z.string()).optional()
      .refine((f) => f === undefined || Object.keys(f).length <= MAX_FILES,
        `files holds more than ${MAX_FILES} entries`)
      .refine((f) => f === undefined ||
        Object.values(f).reduce((n, v) => n + v.length, 0) <= MAX_FILES_BYTES,
      `files hold more than ${MAX_FILES_BYTES} bytes in all`)
      .describe('Files to write beside the program before it runs: relative path → UTF-8 content.'),
  }).strict('run_code takes only language, code, stdin and files; limits and network are ' +
    'set by the operator');
  const outputSchema = z.object({
    stdout: z.string(),
    stderr: z.string(),
    exitCode: z.number().int().nullable().describe('null when the program was killed'),
    timedOut: z.boolean(),
    killedBy: z.string().nullable().describe('timeout, oom, pids, seccomp, signal, cancelled'),
    durationMs: z.number(),
    stdoutTruncated: z.boolean(),
    stderrTruncated: z.boolean(),
    memoryPeakBytes: z.number().nullable(),
    limits: z.record(z.string()).describe('how each limit was enforced'),
    warnings: z.array(z.string()),
    sandbox: z.object({
      timeoutMs: z.number(), memoryMb: z.number().nullable(), cpus: z.number().nullable(),
      pidsLimit: z.number().nullable(), network: z.boolean(), allowedHosts: z.array(z.string()),
    }).describe('the limits this server runs every program with (set by its operator)'),
    // with --session, for a call run in the session
    value: z.string().nullable().optional().describe('the last expression\'s value (session calls)'),
    error: z.object({ type: z.string(), message: z.string() }).nullable().optional()
      .describe('the exception the call raised (session calls)'),
    session: z.object({ state: z.string(), runs: z.number() }).optional()
      .describe('the interpreter after the call: idle, or ended/killed (its state is lost)'),
  });

  const service = s.url !== undefined || s.socketPath !== undefined;
  const cfg = { provider: 'native', moatPath: s.moat };
  if (s.url !== undefined) cfg.url = s.url;
  if (s.socketPath !== undefined) cfg.socketPath = s.socketPath;
  if (s.tokenFile !== undefined) {
    try { cfg.token = fs.readFileSync(s.tokenFile, 'utf8').trim(); } catch (e) {
      throw new UsageError(`--token-file ${s.tokenFile}: ${e.code === 'ENOENT' ? 'no such file' : e.message}`);
    }
  }
  for (const k of EXEC_KEYS) if (s[k] !== undefined) cfg[k] = s[k];
  const request = {};
  for (const k of REQUEST_KEYS) if (s[k] !== undefined) request[k] = s[k];
  const timeout = s.timeout === undefined ? 30000 : s.timeout;
  const applied = {
    timeoutMs: timeout,
    memoryMb: s.memoryMb === undefined ? (service ? null : 512) : s.memoryMb,
    cpus: s.cpus === undefined ? (service ? null : 1) : s.cpus,
    pidsLimit: s.pidsLimit === undefined ? (service ? null : 100) : s.pidsLimit,
    network: !!s.network || !!(s.allowedHosts && s.allowedHosts.length),
    allowedHosts: s.allowedHosts || [],
  };
  const sandbox = createSandbox(cfg);

  // At most maxConcurrent runs at once; up to maxQueued wait; more are refused.
  const maxConcurrent = s.maxConcurrent || 2;
  const maxQueued = s.maxQueued === undefined ? 16 : s.maxQueued;
  let running = 0;
  const waiting = [];
  const acquire = () => {
    if (running < maxConcurrent) { running++; return Promise.resolve(true); }
    if (waiting.length >= maxQueued) return Promise.resolve(false);
    return new Promise((resolve) => waiting.push(resolve));
  };
  const release = () => {
    const next = waiting.shift();
    if (next) next(true); else running--;
  };

  // --session: one session per language for this connection, made at its first call; calls
  // to one session wait for each other (a session runs one step at a time). A session that
  // ended is forgotten: the next call makes a new one.
  const sessions = new Map(); // language → { session: Promise<Session>, tail: Promise }
  const sessionOpts = { language: null };
  for (const k of SESSION_KEYS) if (s[k] !== undefined) sessionOpts[k] = s[k];
  function inSession(language, code, runOpts) {
    let e = sessions.get(language);
    if (!e) {
      e = { session: sandbox.session({ ...sessionOpts, language }), tail: Promise.resolve() };
      e.session.catch(() => { if (sessions.get(language) === e) sessions.delete(language); });
      sessions.set(language, e);
    }
    const entry = e;
    const step = entry.tail.then(() => entry.session).then((ses) => ses.run(code, runOpts).then((r) => {
      if (r.session && r.session.state !== 'idle' && r.session.state !== 'running') {
        if (sessions.get(language) === entry) sessions.delete(language);
        ses.close().catch(() => {});
      }
      return r;
    }, (err) => {
      if (err instanceof SessionGoneError || err instanceof SessionNotFoundError) {
        if (sessions.get(language) === entry) sessions.delete(language);
      }
      throw err;
    }));
    entry.tail = step.catch(() => {});
    return step;
  }

  const server = new McpServer({ name: 'moat', version: require('./package.json').version },
    { capabilities: { tools: {} } });
  const toolError = (sentence, structured) => {
    const r = { content: [{ type: 'text', text: sentence }], isError: true };
    if (structured) {
      r.content.push({ type: 'text', text: render(structured) });
      r.structuredContent = structured;
    }
    return r;
  };
  server.registerTool('run_code', {
    title: 'Run code in a sandbox',
    description: describe(s),
    inputSchema,
    outputSchema,
    annotations: { readOnlyHint: false, destructiveHint: false, idempotentHint: false,
      openWorldHint: applied.network },
  }, async (args) => {
    const opts = { ...request, language: args.language };
    if (args.stdin !== undefined) opts.stdin = args.stdin;
    if (args.files !== undefined) opts.files = args.files;
    const session = s.session && SESSION_LANGUAGES.includes(args.language);
    if (!(await acquire())) {
      log(`run_code refused: ${maxConcurrent} runs and ${maxQueued} waiting already`);
      return toolError(`The sandbox is busy (${maxConcurrent} running, ${maxQueued} waiting); ` +
        'try again when a run has finished.');
    }
    const started = Date.now();
    let r;
    try {
      r = session
        ? await inSession(args.language, args.code, { stdin: opts.stdin, files: opts.files, timeout })
        : await sandbox.run(args.code, opts);
    } catch (e) {
      const kind = e && e.name ? e.name : 'Error';
      log(`run_code ${args.language}: ${kind} after ${Date.now() - started} ms`);
      if (e instanceof SessionGoneError || e instanceof SessionNotFoundError) {
        return toolError(`The ${args.language} interpreter of this conversation has ended ` +
          `(${sentence(e).replace(/\.$/, '')}). Its state is lost; the next call starts a fresh one.`);
      }
      return toolError(sentence(e));
    } finally {
      release();
    }
    const out = structured(r, applied, session);
    log(`run_code ${args.language}: ${r.timedOut ? 'timed out' : r.exitCode !== null &&
      r.exitCode !== undefined ? `exit ${r.exitCode}` : `killed (${r.killedBy || 'signal'})`} in ${out.durationMs} ms`);
    if (r.timedOut) {
      return toolError(`The program did not finish within its time limit of ${timeout} ms ` +
        'and was stopped; its output until then follows.', out);
    }
    return { content: [{ type: 'text', text: render(out) }, ...images(r)], structuredContent: out };
  });
  return { server, sandbox };
}

// A session step's image results (docs/SESSIONS.md, "Results": a figure, display(img))
// as MCP image content, in order: PNG and JPEG (base64 as the service sent them), at most
// MAX_IMAGES; a run has none.
const MAX_IMAGES = 16;
function images(r) {
  const out = [];
  for (const res of Array.isArray(r && r.results) ? r.results : []) {
    const data = res && res.data && typeof res.data === 'object' ? res.data : {};
    for (const mimeType of ['image/png', 'image/jpeg']) {
      if (typeof data[mimeType] === 'string' && out.length < MAX_IMAGES) {
        out.push({ type: 'image', data: data[mimeType], mimeType });
        break;
      }
    }
  }
  return out;
}

// A thrown SandboxError → one sentence for the model (the client's message carries the
// kind: "Sandbox policy violation: ...", "Sandbox provider ... unavailable: ...").
function sentence(e) {
  let m = e && e.message ? String(e.message) : String(e);
  m = m.replace(/\s+/g, ' ').trim().slice(0, 1000);
  if (!m) m = 'The sandbox failed without saying why';
  return /[.!?]$/.test(m) ? m : `${m}.`;
}

function structured(r, applied, session) {
  const num = (v) => (typeof v === 'number' && Number.isFinite(v) ? v : null);
  const limits = {};
  if (r.limits && typeof r.limits === 'object') {
    for (const [k, v] of Object.entries(r.limits)) if (typeof v === 'string') limits[k] = v;
  }
  return {
    stdout: typeof r.stdout === 'string' ? r.stdout : '',
    stderr: typeof r.stderr === 'string' ? r.stderr : '',
    exitCode: Number.isInteger(r.exitCode) ? r.exitCode : null,
    timedOut: r.timedOut === true,
    killedBy: typeof r.killedBy === 'string' ? r.killedBy : null,
    durationMs: num(r.durationMs) === null ? 0 : r.durationMs,
    stdoutTruncated: r.stdoutTruncated === true,
    stderrTruncated: r.stderrTruncated === true,
    memoryPeakBytes: num(r.memoryPeakBytes),
    limits,
    warnings: Array.isArray(r.warnings) ? r.warnings.filter((w) => typeof w === 'string') : [],
    sandbox: applied,
    ...(session ? {
      value: typeof r.value === 'string' ? r.value : null,
      error: r.error && typeof r.error === 'object'
        ? { type: String(r.error.type), message: String(r.error.message) } : null,
      session: {
        state: r.session && typeof r.session.state === 'string' ? r.session.state : 'unknown',
        runs: r.session && num(r.session.runs) !== null ? r.session.runs : 0,
      },
    } : {}),
  };
}

// The result as text, for hosts that show the model text content only.
function render(o) {
  const cut = (t) => (t.length > MAX_RESULT_TEXT ? `${t.slice(0, MAX_RESULT_TEXT)}\n[cut here]` : t);
  const status = o.timedOut ? `timed out after ${o.sandbox.timeoutMs} ms`
    : o.exitCode !== null ? `exit code ${o.exitCode}`
      : `killed (${o.killedBy || 'signal'})`;
  const lines = [`${status}, ${o.durationMs} ms`];
  lines.push(`--- stdout${o.stdoutTruncated ? ' (truncated)' : ''} ---`, cut(o.stdout));
  lines.push(`--- stderr${o.stderrTruncated ? ' (truncated)' : ''} ---`, cut(o.stderr));
  if (o.error) lines.push(`--- raised ---`, `${o.error.type}: ${o.error.message}`);
  if (o.value !== undefined && o.value !== null) lines.push('--- value ---', cut(o.value));
  if (o.session && o.session.state !== 'idle') {
    lines.push(`(the interpreter has ${o.session.state === 'ended' ? 'exited' : 'been stopped'}: ` +
      'its state is lost; the next call starts a fresh one)');
  }
  for (const w of o.warnings) lines.push(`warning: ${w}`);
  return lines.join('\n');
}

async function main() {
  let s;
  let built;
  try {
    s = settingsFrom(process.argv.slice(2));
    if (s.help) { process.stdout.write(usage()); return 0; }
    built = buildServer(s);
  } catch (e) {
    if (!(e instanceof UsageError) && !(e && /^Sandbox/.test(e.name || ''))) throw e;
    log(e.message);
    return 2;
  }
  const { server, sandbox } = built;
  const transport = new sdk.StdioServerTransport();
  let closing = false;
  const shutdown = async (why) => {
    if (closing) return;
    closing = true;
    log(`stopping (${why})`);
    await sandbox.dispose(); // SIGTERM to every moat exec still running
    try { await server.close(); } catch { /* already closed */ }
    process.exitCode = 0;
    setTimeout(() => process.exit(0), 100).unref();
  };
  process.stdin.on('end', () => shutdown('standard input closed'));
  process.on('SIGTERM', () => shutdown('SIGTERM'));
  process.on('SIGINT', () => shutdown('SIGINT'));
  await server.connect(transport);
  server.server.onclose = () => shutdown('transport closed');
  log(`serving run_code over stdio (${s.url !== undefined || s.socketPath !== undefined
    ? 'through moat serve' : 'moat exec'}${s.session ? ', a session per language' : ''})`);
  return undefined;
}

main().then((code) => { if (code !== undefined) process.exitCode = code; }, (e) => {
  log(`internal error: ${e && e.message ? e.message : e}`);
  process.exit(1);
});
