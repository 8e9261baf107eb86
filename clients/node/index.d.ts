// Types for moat-sandbox (hand-written; index.js requires nothing: the package's dependencies are moat-mcp's).

export type SandboxProvider = 'native' | 'docker' | 'e2b' | 'daytona' | 'none';
export type SandboxLanguage = 'python' | 'javascript' | 'typescript' | 'bash' | 'sh';

/** The `sandbox` object of aistack.config.json, plus moat's own keys. */
export interface SandboxConfig {
  /** Default 'native' (aistack's is 'none'). 'none' refuses every run with SandboxPolicyError. */
  provider?: SandboxProvider;
  /** Wall-clock ms per run (default 30000). */
  timeout?: number;
  /** Default 512 (native, docker). */
  memoryMb?: number;
  /** Default 1 (native, docker). */
  cpus?: number;
  /** Default 100 (native, docker). */
  pidsLimit?: number;
  /** Default network for runs that do not say (default false). */
  network?: boolean;
  /** Passed to moat as E2B_API_KEY in its environment, never written to disk. */
  e2bApiKey?: string;
  /** https only; a private, loopback or link-local address or localhost is a
   * SandboxConfigError at createSandbox (a name resolving to one: at the first run). */
  daytonaApiUrl?: string;
  /** Passed to moat as DAYTONA_API_KEY in its environment, never written to disk. */
  daytonaApiKey?: string;
  /** Docker images by language. */
  images?: Partial<Record<SandboxLanguage, string>>;
  strictLimits?: boolean;
  maxOutputBytes?: number;
  e2bApiUrl?: string;
  e2bTemplate?: string;
  e2bSandboxUrl?: string;
  dockerPath?: string;
  policy?: string;
  rootfs?: string;
  /** Client only: the moat binary (default $MOAT_BIN, else `moat` on PATH). */
  moatPath?: string;
  /** Client only: how long past `timeout` to wait for moat before killing it. */
  deadlineGraceMs?: number;
  /** Client only: use this moat config file instead of writing one from cfg. */
  configPath?: string;
  /**
   * Client only: run through a `moat serve` at this `http://` or `https://` address
   * (`POST <url>/v1/run`) instead of spawning `moat exec`. Exclusive with `socketPath`;
   * needs provider 'native' (the default).
   */
  url?: string;
  /** Client only: run through a `moat serve` listening on this unix socket. */
  socketPath?: string;
  /** Client only: the service's bearer token (`Authorization: Bearer`); needs url or socketPath. */
  token?: string;
  /**
   * Client only: without url/socketPath, try the user's service ($MOAT_SOCKET, else
   * $XDG_RUNTIME_DIR/moat.sock) first and fall back to `moat exec` (saying why in
   * `warnings`). Default true; false (or MOAT_SERVICE=off) always runs `moat exec`.
   */
  service?: boolean;
}

export interface RunOptions {
  language?: SandboxLanguage;
  timeout?: number;
  env?: Record<string, string>;
  files?: Record<string, string>;
  stdin?: string;
  network?: boolean;
  memoryMb?: number;
  cpus?: number;
  pidsLimit?: number;
  strictLimits?: boolean;
  maxOutputBytes?: number;
  /** Egress only to these `scheme://host[:port]` entries, through moat's proxy. */
  allowedHosts?: string[];
  /** Glob patterns under /sandbox whose files come back in `result.files`. */
  outputs?: string[];
  /** Each chunk of stdout as the program writes it (bytes that are not UTF-8 decoded with
   * U+FFFD); the result's `stdout` is still the whole text. A throw ends the run. */
  onStdout?: (text: string) => void;
  /** Each chunk of stderr as the program writes it; as `onStdout`. */
  onStderr?: (text: string) => void;
  /** The key-value store's scope (Spin's sandboxId, at most 256 bytes); native only. */
  sandboxId?: string;
  /** Give the program the key-value store scoped to `sandboxId` (docs/KV.md). */
  kvEnabled?: boolean;
}

export interface OutputFile {
  size: number;
  truncated: boolean;
  encoding: 'utf8' | 'base64';
  content: string;
  /** Only when the path is not valid UTF-8 (its key then starts with `.moat-nonutf8/`):
   * the path's exact bytes, base64. */
  pathBase64?: string;
}

export interface RunResult {
  stdout: string;
  stderr: string;
  /** null when the program was killed (timeout, OOM, signal). */
  exitCode: number | null;
  timedOut: boolean;
  durationMs: number;
  provider: SandboxProvider;
  signal?: string | null;
  oomKilled?: boolean;
  killedBy?: string | null;
  memoryPeakBytes?: number | null;
  cpuTimeMs?: number | null;
  stdoutTruncated?: boolean;
  stderrTruncated?: boolean;
  limits?: { memory: string; pids: string; cpu: string };
  warnings?: string[];
  /** true: a warm sandbox of a moat serve (the user service) answered. */
  pool?: boolean;
  /** With `outputs`: the matching files, by path relative to /sandbox. */
  files?: Record<string, OutputFile>;
  /** The network mode and, with egress, every connection and DNS question moat decided on. */
  network?: {
    mode: 'none' | 'egress' | 'allowlist';
    connections?: Array<{
      kind: 'tcp' | 'dns' | 'proxy';
      method?: string;
      host: string;
      address?: string;
      port?: number;
      allowed: boolean;
      reason?: string;
      answers?: string[];
      sent?: number;
      received?: number;
    }>;
    connectionsNotListed?: number;
    bytes?: number;
    [extra: string]: unknown;
  };
  [extra: string]: unknown;
}

export interface Sandbox {
  readonly provider: SandboxProvider;
  run(code: string, opts?: RunOptions): Promise<RunResult>;
  /**
   * A live interpreter that keeps its state between runs (docs/SESSIONS.md): `POST
   * /v1/sessions`. Needs a `moat serve` (url or socketPath): without one it rejects with
   * SandboxConfigError. Bad options reject before any request.
   */
  session(opts?: SessionOptions): Promise<Session>;
  /**
   * Stops running moat processes and removes the client's temporary config; through
   * `moat serve`, aborts the requests in flight (they reject with SandboxError) and closes
   * the sessions opened through this sandbox.
   */
  dispose(): Promise<void>;
}

export type SessionLanguage = 'python' | 'javascript' | 'py' | 'python3' | 'js' | 'node';

/** `POST /v1/sessions`'s body; limits default to the service's serve.defaults, within serve.max.
 * The config's memoryMb, cpus, pidsLimit, network, strictLimits, maxOutputBytes are sent
 * unless given here. */
export interface SessionOptions {
  language?: SessionLanguage;
  /** The key-value store's scope (with kvEnabled). */
  sandboxId?: string;
  kvEnabled?: boolean;
  memoryMb?: number;
  cpus?: number;
  pidsLimit?: number;
  strictLimits?: boolean;
  maxOutputBytes?: number;
  env?: Record<string, string>;
  network?: boolean;
  allowedHosts?: string[];
  /** The session ends after this long without a run (default: the service's, 600000). */
  idleTimeoutMs?: number;
  /** The session ends this long after it was made (default: the service's, 3600000). */
  maxLifetimeMs?: number;
}

/** A session's run: only what changes from step to step. */
export interface SessionRunOptions {
  stdin?: string;
  /** Written under /sandbox before the code runs. */
  files?: Record<string, string>;
  /** ms for this step (default the config's timeout, else the service's). A step that
   * times out kills the session. */
  timeout?: number;
  onStdout?: (text: string) => void;
  onStderr?: (text: string) => void;
}

export type SessionState = 'idle' | 'running' | 'killed' | 'ended' | 'expired';

export interface SessionStatus {
  id: string;
  state: SessionState;
  runs: number;
  /** Absent where nothing measures them (no cgroup: rootless without a delegated one),
   * with a `warnings` entry saying so; never a 0 that was not read. */
  cpuTimeMs?: number;
  memoryBytes?: number;
  warnings?: string[];
  expiresAt: string;
  idleExpiresAt: string;
  [extra: string]: unknown;
}

export interface SessionInfo extends SessionStatus {
  language: string;
  createdAt: string;
  limits?: Record<string, unknown>;
  /** Why the session is no longer live, else null. */
  reason: string | null;
}

export interface SessionRunResult extends RunResult {
  /** null, or the step's exception (its traceback is in stderr, exitCode 1). */
  error: { type: string; message: string } | null;
  /** The last expression's repr (Python) / util.inspect (node), or null; at most 64 KiB. */
  value: string | null;
  valueTruncated?: boolean;
  /** Python: every matplotlib figure the step left open, as PNG. */
  display: Array<{ type: string; data: string }>;
  /** The session after the step ('ended' after os._exit/process.exit, 'killed' after a timeout). */
  session: SessionStatus;
}

export interface Session {
  /** `ses_` + 32 hex digits: bound to the credential that made it. */
  readonly id: string;
  readonly language?: string;
  readonly expiresAt?: string;
  /** POST /v1/sessions's whole answer. */
  readonly created: Record<string, unknown>;
  /** Runs `code` in the session's interpreter. A run while another runs rejects with
   * SessionBusyError; after close() with SessionGoneError (no request). */
  run(code: string, opts?: SessionRunOptions): Promise<SessionRunResult>;
  /** GET /v1/sessions/{id}. */
  info(): Promise<SessionInfo>;
  /** DELETE /v1/sessions/{id}; idempotent, and a session the service already ended is closed. */
  close(): Promise<void>;
}

export function createSandbox(cfg?: SandboxConfig | null): Sandbox;

/** aistack's names for the same types, so that swapping the import is the whole change. */
export type SandboxOptions = RunOptions;
export type SandboxResult = RunResult;
export type SandboxAdapter = Sandbox;
/** The config with every default applied (aistack's ResolvedSandboxConfig). */
export interface ResolvedSandboxConfig extends SandboxConfig {
  provider: SandboxProvider;
  timeout: number;
  memoryMb: number;
  cpus: number;
  pidsLimit: number;
  network: boolean;
}

/**
 * aistack's defaults, filled in for every key a config leaves out: timeout 30000 ms,
 * memoryMb 512, cpus 1, pidsLimit 100, network false. The limits bind the native and
 * docker providers (e2b and daytona do not apply them); through `moat serve` (url,
 * socketPath) the service's own defaults apply instead. `provider` is 'native' here,
 * 'none' in aistack: a moat default run is sandboxed; `{ provider: 'none' }` refuses.
 */
export const DEFAULT_SANDBOX_CONFIG: Readonly<{
  provider: 'native';
  timeout: 30000;
  memoryMb: 512;
  cpus: 1;
  pidsLimit: 100;
  network: false;
}>;

/**
 * Every error class takes moat's `(message, { provider, cause })` or aistack's form:
 * `new SandboxError(message, provider, cause?)`, and for the subclasses
 * `new SandboxPolicyError(provider, reason)` (likewise Unavailable, Config, with an
 * optional cause). The subclasses' messages carry aistack's prefixes: `Sandbox policy
 * violation: `, `Sandbox provider "<p>" unavailable: `, `Sandbox configuration error: `.
 */
export class SandboxError extends Error {
  constructor(message: string, options?: { provider?: string; cause?: unknown });
  constructor(message: string, provider: string, cause?: unknown);
  provider?: string;
  cause?: unknown;
  /** Through `moat serve`: the HTTP status of the refusal (400, 401, 403, 413, 503...). */
  status?: number;
  /** Through `moat serve`: the service's `error.type` (e.g. 'AuthenticationError', 'ServerBusy'). */
  errorType?: string;
}
export class SandboxUnavailableError extends SandboxError {
  constructor(message: string, options?: { provider?: string; cause?: unknown });
  constructor(provider: string, reason: string, cause?: unknown);
  /** Through `moat serve`: the service's `Retry-After` in ms (ServerBusy, shutting down). */
  retryAfterMs?: number;
}
/** Refused: provider 'none', an unsupported language, a bad env name, a path outside /sandbox. */
export class SandboxPolicyError extends SandboxError {
  constructor(message: string, options?: { provider?: string; cause?: unknown });
  constructor(provider: string, reason: string);
}
/** 409: a step is running in this session. */
export class SessionBusyError extends SandboxError {
  constructor(message: string, options?: { provider?: string; cause?: unknown });
  sessionId?: string;
}
/** 410: the session was killed, expired or ended; `reason` says which and why. */
export class SessionGoneError extends SandboxError {
  constructor(message: string, options?: { provider?: string; cause?: unknown; reason?: string });
  reason: string;
  sessionId?: string;
}
/** 404: no such session for this caller (never existed, another caller's, gone long ago). */
export class SessionNotFoundError extends SandboxError {
  constructor(message: string, options?: { provider?: string; cause?: unknown });
  sessionId?: string;
}
/** Malformed request or config; a refused daytonaApiUrl already at createSandbox. */
export class SandboxConfigError extends SandboxError {
  constructor(message: string, options?: { provider?: string; cause?: unknown });
  constructor(provider: string, reason: string);
}

// ---- live sandboxes (docs/SANDBOXES.md, `/v1/sandboxes`) ----------------------------------

/** Where the service is: exactly one of url or socketPath; token when it has one. */
export interface LiveConnection {
  url?: string;
  socketPath?: string;
  token?: string;
  /** How long a control request (create, get, stat, a signal) may take; default 60000 ms.
   * File and process streams have no client deadline. */
  requestTimeoutMs?: number;
}

/** `POST /v1/sandboxes`'s body: limits default to the service's serve.defaults, within serve.max. */
export interface LiveSandboxCreateOptions extends LiveConnection {
  memoryMb?: number;
  cpus?: number;
  pidsLimit?: number;
  strictLimits?: boolean;
  env?: Record<string, string>;
  network?: boolean;
  allowedHosts?: string[];
  allowedCidrs?: string[];
  kvEnabled?: boolean;
  sandboxId?: string;
  /** 100 ms to the service's serve.sessions.maxLifetimeMs (default the smaller of 1 h and that). */
  lifetimeMs?: number;
  /** Ended after this long without a request (default 600000). */
  idleTimeoutMs?: number;
  /** String labels: at most 64 pairs, keys 1-128 bytes, values at most 1024. */
  metadata?: Record<string, string>;
}

export interface LiveSandboxInfo {
  /** `sbx_<node>_` + 32 hex digits; bound to the credential that made it. */
  id: string;
  state: 'running' | 'ended';
  createdAt: string;
  expiresAt: string;
  idleTimeoutMs: number;
  memoryMb: number;
  cpus: number;
  pidsLimit: number;
  /** How each limit is enforced: 'cgroup-v1', 'cgroup-v2', 'rlimit', 'none'. */
  limits: Record<string, string>;
  /** What its making said (a limit's fallback: `cpus is not enforced` rootless without a cgroup). */
  warnings: string[];
  usage: {
    cpuTimeMs: number | null;
    memoryBytes: number | null;
    memoryPeakBytes: number | null;
    processes: number;
    idleMs: number;
  };
  metadata: Record<string, string>;
  /** Once ended: why. */
  reason?: string;
  [extra: string]: unknown;
}

export interface CommandOptions {
  /** Each chunk of stdout as it comes (bytes that are not UTF-8 decoded with U+FFFD). A throw
   * ends the client's read (the process goes on). */
  onStdout?: (text: string) => void;
  onStderr?: (text: string) => void;
  /** Resolve at once with a CommandHandle instead of waiting for the exit. */
  background?: boolean;
  /** Under /sandbox or /tmp (default /sandbox). */
  cwd?: string;
  /** Over the sandbox's env. */
  env?: Record<string, string>;
  /** true: stdin is a pipe (sendStdin/closeStdin); a string or bytes: written, then closed;
   * default: /dev/null. */
  stdin?: boolean | string | Uint8Array | ArrayBuffer;
  /** Killed (SIGKILL) after this long; the result says `timedOut`. Default: none. */
  timeoutMs?: number;
  /** What the result keeps of each of stdout and stderr (default 16 MiB; the callbacks get
   * everything): past it `stdoutTruncated`/`stderrTruncated`. */
  maxOutputBytes?: number;
}

export interface CommandResult {
  pid: number;
  /** null when a signal ended it. */
  exitCode: number | null;
  /** The signal's number, or null. */
  signal: number | null;
  stdout: string;
  stderr: string;
  stdoutTruncated: boolean;
  stderrTruncated: boolean;
  timedOut: boolean;
}

export interface ProcessInfo {
  pid: number;
  state: 'running' | 'exited' | 'lost';
  exitCode?: number | null;
  signal?: number | null;
  attached?: boolean;
  stdin?: boolean;
  [extra: string]: unknown;
}

/** A background process (or one re-attached): its output is read as it comes. */
export interface CommandHandle {
  readonly pid: number;
  /** Its result once it exits; SandboxGoneError when the sandbox ends first. */
  wait(): Promise<CommandResult>;
  /** A signal to its process group (default 'KILL'). */
  kill(signal?: string | number): Promise<void>;
  /** Needs `stdin: true`; the service waits up to 10 s for room in the pipe. */
  sendStdin(data: string | Uint8Array | ArrayBuffer): Promise<{ written: number; complete: boolean }>;
  closeStdin(): Promise<void>;
}

export interface Commands {
  /** A shell line (`/bin/sh -c`) or an argv. */
  run(cmd: string | string[], opts: CommandOptions & { background: true }): Promise<CommandHandle>;
  run(cmd: string | string[], opts?: CommandOptions): Promise<CommandResult>;
  /** Re-attach to a running process's output (one reader at a time: 409 while another is attached). */
  connect(pid: number, opts?: Pick<CommandOptions, 'onStdout' | 'onStderr' | 'timeoutMs' | 'maxOutputBytes'>): Promise<CommandHandle>;
  /** Every process kept (at most 128). */
  list(): Promise<ProcessInfo[]>;
  /** Its state after waiting up to waitMs (0-60000). */
  info(pid: number, opts?: { waitMs?: number }): Promise<ProcessInfo>;
  kill(pid: number, signal?: string | number): Promise<void>;
  sendStdin(pid: number, data: string | Uint8Array | ArrayBuffer): Promise<{ written: number; complete: boolean }>;
  closeStdin(pid: number): Promise<void>;
}

export interface EntryInfo {
  path: string;
  type: 'file' | 'dir' | 'symlink' | 'fifo' | 'socket' | 'char' | 'block';
  size: number;
  /** Octal text, e.g. "0644". */
  mode: string;
  mtimeMs: number;
  [extra: string]: unknown;
}

/** Paths are absolute, under /sandbox or /tmp; symlinks are never followed. */
export interface Files {
  /** Creates missing parents unless `mkdirs: false`; a Readable is streamed as it comes. */
  write(path: string, data: string | Uint8Array | ArrayBuffer | NodeJS.ReadableStream,
    opts?: { mkdirs?: boolean }): Promise<{ path: string; size: number }>;
  read(path: string, opts?: { format?: 'text'; range?: [number, number?] }): Promise<string>;
  read(path: string, opts: { format: 'bytes'; range?: [number, number?] }): Promise<Buffer>;
  read(path: string, opts: { format: 'stream'; range?: [number, number?] }): Promise<NodeJS.ReadableStream>;
  /** `depth` 1-32 (default 1); the array's `truncated` says the 10000-entry bound was reached. */
  list(path: string, opts?: { depth?: number }): Promise<EntryInfo[] & { readonly truncated: boolean }>;
  stat(path: string): Promise<EntryInfo>;
  exists(path: string): Promise<boolean>;
  /** true when made, false when a directory was there already. */
  makeDir(path: string, opts?: { parents?: boolean }): Promise<boolean>;
  /** Within /sandbox or within /tmp (two filesystems). */
  rename(from: string, to: string): Promise<void>;
  remove(path: string, opts?: { recursive?: boolean }): Promise<void>;
}

/** A live sandbox of a moat serve: processes and files that outlive a request. */
export class LiveSandbox {
  private constructor();
  static create(opts: LiveSandboxCreateOptions): Promise<LiveSandbox>;
  /** A sandbox this caller made before; an ended one rejects with SandboxGoneError. */
  static connect(id: string, opts: LiveConnection): Promise<LiveSandbox>;
  /** The caller's own, newest first; `next` for the next page (null at the end). */
  static list(opts: LiveConnection & { metadata?: Record<string, string>; limit?: number; next?: string | null }):
    Promise<{ sandboxes: LiveSandboxInfo[]; next: string | null }>;
  readonly sandboxId: string;
  readonly id: string;
  /** The last object the service answered (create, connect, getInfo). */
  info: LiveSandboxInfo;
  readonly commands: Commands;
  readonly files: Files;
  getInfo(): Promise<LiveSandboxInfo>;
  isRunning(): Promise<boolean>;
  /** Its lifetime ends ms from now (never past the service's maximum after its making). */
  setTimeout(ms: number): Promise<LiveSandboxInfo>;
  /** Ends it: nothing of it is left when this resolves; idempotent. Closes the connection. */
  kill(): Promise<void>;
  /** Closes this client's connection (aborting its streams); the sandbox lives on. */
  close(): void;

  // ---- code contexts (docs/CONTEXTS.md) ----
  /** A new interpreter with its own globals and working directory; resolves once it is ready. */
  createCodeContext(opts?: { language?: CodeLanguage; cwd?: string }): Promise<CodeContext>;
  /** Oldest first. */
  listCodeContexts(): Promise<CodeContext[]>;
  getCodeContext(context: CodeContext | string): Promise<CodeContext>;
  /** Kills its interpreter and starts a fresh one (same id, language, cwd; its state gone). */
  restartCodeContext(context: CodeContext | string): Promise<CodeContext>;
  removeCodeContext(context: CodeContext | string): Promise<void>;
  /** Interrupts its running step (KeyboardInterrupt in Python): true when one was running. */
  interruptCodeContext(context: CodeContext | string): Promise<boolean>;
  /** Runs code in `context`, or in this client's default context of `language` (python
   * unless said; made at first use). The callbacks get each event as it happens. */
  runCode(code: string, opts?: RunCodeOptions): Promise<Execution>;
}

export type CodeLanguage = 'python' | 'py' | 'python3' | 'javascript' | 'js' | 'node' | 'typescript' | 'ts';

export interface CodeContext {
  /** `ctx_` + 32 hex digits. */
  id: string;
  language: 'python' | 'javascript' | 'typescript';
  cwd: string;
  /** Its interpreter's pid in the sandbox. */
  pid: number;
  state: 'idle' | 'running' | 'killed' | 'ended';
  executionCount: number;
  reason?: string | null;
  [extra: string]: unknown;
}

export interface RunCodeOptions {
  /** Not with `context` (a context has its language). */
  language?: CodeLanguage;
  context?: CodeContext | string;
  /** The step's timeout (default the service's 30000): then an interrupt, not a kill; `timedOut`. */
  timeoutMs?: number;
  onStdout?: (text: string) => void;
  onStderr?: (text: string) => void;
  /** Each result as it is made (a display(), a figure, the last expression's value). */
  onResult?: (result: RichResult) => void;
  onError?: (error: ExecutionError) => void;
  /** What the Execution keeps of each of stdout and stderr (default 16 MiB). */
  maxOutputBytes?: number;
}

/** One result of a step (a code context's, as a session step's): the service's
 * `{isMain, data}` read under E2B's names (getters, not enumerable; undefined when absent). */
export interface RichResult {
  /** The last expression's value. */
  isMain: boolean;
  /** MIME type → value, as the service sent it. */
  data: Record<string, unknown>;
  readonly isMainResult: boolean;
  /** text/plain (always there from moat). */
  readonly text?: string;
  readonly html?: string;
  readonly markdown?: string;
  readonly svg?: string;
  /** base64 */
  readonly png?: string;
  /** base64 */
  readonly jpeg?: string;
  readonly latex?: string;
  readonly json?: unknown;
  readonly javascript?: string;
  /** Which of those names it has ('text', 'html', 'png', ...). */
  formats(): string[];
}

export interface ExecutionError {
  /** e.g. 'ZeroDivisionError', 'KeyboardInterrupt'. */
  name: string;
  value: string;
  traceback: string[];
  [extra: string]: unknown;
}

export class Execution {
  private constructor();
  results: RichResult[];
  logs: { stdout: string[]; stderr: string[] };
  error: ExecutionError | null;
  executionCount: number | null;
  /** The step's exit as a session's (sys.exit included); null when the interpreter ended without answering. */
  exitCode: number | null;
  timedOut: boolean;
  interrupted: boolean;
  /** The interpreter did not stop within the grace after the interrupt and was killed (`context.reason` says). */
  killed: boolean;
  context: { id: string; state: string; reason: string | null } | null;
  durationMs: number | null;
  warnings: string[];
  stdoutTruncated: boolean;
  stderrTruncated: boolean;
  resultsTruncated: boolean;
  /** The last expression's value (isMain), or undefined. */
  readonly mainResult: RichResult | undefined;
  /** The main result's text. */
  readonly text: string | undefined;
  readonly stdout: string;
  readonly stderr: string;
}

/** 404 SandboxNotFound: no such sandbox for this caller (never existed, another caller's, ended long ago). */
export class SandboxNotFoundError extends SandboxError {
  sandboxId?: string;
}
/** 410 SandboxGone: the sandbox ended; `reason` says why ("the sandbox ended: its agent was killed (signal 9)"). */
export class SandboxGoneError extends SandboxError {
  constructor(message: string, options?: { provider?: string; cause?: unknown; reason?: string });
  reason: string;
  sandboxId?: string;
}
/** 404 FileNotFound / ProcessNotFound / ContextNotFound inside a sandbox that is there (`errorType` says which). */
export class NotFoundError extends SandboxError {
  sandboxId?: string;
}
