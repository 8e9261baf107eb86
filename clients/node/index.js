'use strict';
// moat-sandbox: the aistack sandbox contract on top of the `moat` binary.
// Every run spawns `moat exec --provider P --config F`, writes the JSON
// request to its stdin and parses the JSON result. No runtime dependencies.
const { spawn } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');

class SandboxError extends Error {
  constructor(message, options = {}) {
    super(message);
    this.name = 'SandboxError';
    this.provider = options.provider;
  }
}
class SandboxUnavailableError extends SandboxError {
  constructor(message, options) { super(message, options); this.name = 'SandboxUnavailableError'; }
}
class SandboxPolicyError extends SandboxError {
  constructor(message, options) { super(message, options); this.name = 'SandboxPolicyError'; }
}
class SandboxConfigError extends SandboxError {
  constructor(message, options) { super(message, options); this.name = 'SandboxConfigError'; }
}

const ERROR_CLASSES = {
  SandboxUnavailableError, SandboxPolicyError, SandboxConfigError, SandboxError,
};
const PROVIDERS = ['native', 'docker', 'e2b', 'daytona', 'none'];
// Keys only this client understands: never written to moat's config file.
const CLIENT_KEYS = new Set(['moatPath', 'deadlineGraceMs', 'configPath']);
// API keys travel to moat through its environment, never through a file.
const KEY_ENV = { e2bApiKey: 'E2B_API_KEY', daytonaApiKey: 'DAYTONA_API_KEY' };
const REQUEST_KEYS = ['language', 'timeout', 'env', 'files', 'stdin', 'network', 'memoryMb',
  'cpus', 'pidsLimit', 'strictLimits', 'maxOutputBytes', 'allowedHosts', 'outputs'];
const DEFAULT_TIMEOUT = 30000;
// How long past the sandbox timeout the client waits for moat itself: remote
// providers also create and delete a sandbox, which takes longer.
const DEFAULT_GRACE = { native: 5000, docker: 20000, e2b: 180000, daytona: 300000, none: 5000 };
const KILL_WAIT_MS = 2000;

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
  const moat = cfg.moatPath || process.env.MOAT_BIN || 'moat';
  const grace = cfg.deadlineGraceMs === undefined ? DEFAULT_GRACE[provider] : cfg.deadlineGraceMs;
  if (typeof grace !== 'number' || !(grace >= 0)) {
    throw new SandboxConfigError('deadlineGraceMs must be a number >= 0', { provider });
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

  function run(code, opts = {}) {
    if (disposed) return Promise.reject(new SandboxError('sandbox disposed', { provider }));
    if (typeof code !== 'string') {
      return Promise.reject(new SandboxConfigError('code must be a string', { provider }));
    }
    if (provider === 'none') {
      return Promise.reject(new SandboxPolicyError(
        'sandboxing is disabled (provider "none"): refusing to run code', { provider }));
    }
    const request = { code };
    for (const k of REQUEST_KEYS) if (opts[k] !== undefined) request[k] = opts[k];
    const timeout = typeof request.timeout === 'number' ? request.timeout
      : typeof cfg.timeout === 'number' ? cfg.timeout : DEFAULT_TIMEOUT;
    const deadline = timeout + grace;
    const started = Date.now();

    return new Promise((resolve, reject) => {
      let child;
      try {
        child = spawn(moat, ['exec', '--provider', provider, '--config', configFile], {
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
      child.stdout.on('data', (d) => out.push(d));
      child.stderr.on('data', (d) => { if (err.length < 64) err.push(d); });
      child.stdin.on('error', () => {}); // moat may exit before reading everything
      child.on('error', (e) => {
        finish(reject, new SandboxUnavailableError(
          e.code === 'ENOENT' ? `moat binary not found (${moat}); install moat or set moatPath`
            : `cannot run moat (${moat}): ${e.message}`, { provider }));
      });
      child.on('close', (status, signal) => {
        if (killTimer && status !== null) clearTimeout(killTimer);
        const text = Buffer.concat(out).toString('utf8');
        let json;
        try {
          json = JSON.parse(text);
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
    for (const c of children) c.kill('SIGTERM');
    if (dir) fs.rmSync(dir, { recursive: true, force: true });
  }

  return { provider, run, dispose };
}

module.exports = {
  createSandbox, SandboxError, SandboxUnavailableError, SandboxPolicyError, SandboxConfigError,
};
