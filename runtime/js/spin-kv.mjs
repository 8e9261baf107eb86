// The scoped key-value store, shaped like Spin's "@spinframework/spin-kv".
//
//   import * as kv from "@spinframework/spin-kv";
//   const store = kv.openDefault();
//   store.set("visits", "1");           // Uint8Array, string, or an object (as JSON)
//   store.get("visits");                // Uint8Array | null
//
// Every call is synchronous: a request goes to moat's broker over the socket
// whose fd number is in the environment variable MOAT_KV_FD, and the call
// returns once the broker answered (after the storage I/O). docs/KV.md is the
// contract, including the wire format used below. Without MOAT_KV_FD (the
// request did not say "kvEnabled": true) this module still imports, but
// opening a store throws a KvError (kind "access_denied").
//
// kv-register.mjs maps the specifier "@spinframework/spin-kv" here. The checks
// below only give early, clear errors; the broker re-checks everything.
import fs from "node:fs";

const GET = 1, SET = 2, DELETE = 3, EXISTS = 4, KEYS = 5, OPEN = 6;
const OK = 0, NOT_FOUND = 1, ERROR = 2;
const MAX_KEY = 255; // bytes of UTF-8
const MAX_FRAME = 0xffffffff; // a frame's u32 length
const DISABLED = "kvEnabled is false for this request: the key-value store is not available";
const EOF = "the key-value broker closed the connection";

const encoder = new TextEncoder();
const decoder = new TextDecoder("utf-8", { fatal: true });
const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

/** A key-value store error. `kind` is one of "no_such_store",
 * "access_denied", "store_table_full" (a quota), "invalid" (a bad key or
 * value) or "other"; `message` is one line saying why. */
export class KvError extends Error {
  constructor(kind, message) {
    super(message);
    this.name = "KvError";
    this.kind = kind;
  }
}

let sleepCell = null;
function sleepMs(ms) {
  sleepCell ??= new Int32Array(new SharedArrayBuffer(4));
  Atomics.wait(sleepCell, 0, 0, ms);
}

// The program's end of the broker socket, shared by every store. After a
// failure that may leave the stream between two frames (EOF, an I/O error),
// it is dead: every later call throws the same error instead of reading out
// of step.
class Connection {
  constructor(fd) {
    this.fd = fd;
    this.dead = null; // [kind, message] once set
  }

  // [status, payload] of one request.
  call(op, key = EMPTY, value = EMPTY) {
    if (this.dead) throw new KvError(...this.dead);
    const head = new Uint8Array(9 + key.length);
    const view = new DataView(head.buffer);
    view.setUint32(0, 5 + key.length + value.length, true);
    head[4] = op;
    view.setUint32(5, key.length, true);
    head.set(key, 9);
    try {
      if (value.length <= 65536) {
        const frame = new Uint8Array(head.length + value.length);
        frame.set(head);
        frame.set(value, head.length);
        this.write(frame);
      } else { // no copy of a big value
        this.write(head);
        this.write(value);
      }
      const top = this.read(5);
      const size = new DataView(top.buffer).getUint32(0, true);
      if (size < 1) throw new KvError("other", "the key-value broker sent a malformed answer");
      return [top[4], this.read(size - 1)];
    } catch (e) {
      this.dead = e instanceof KvError
        ? [e.kind, e.message]
        : ["other", `the key-value broker connection failed: ${e?.code ?? e?.message ?? e}`];
      if (e instanceof KvError) throw e;
      throw new KvError(...this.dead);
    }
  }

  write(buf) {
    let off = 0;
    let pause = 0.05;
    while (off < buf.length) {
      let n;
      try {
        n = fs.writeSync(this.fd, buf, off, buf.length - off);
      } catch (e) {
        if (e.code === "EAGAIN" || e.code === "EWOULDBLOCK") {
          sleepMs(pause); // the fd is non-blocking: wait for the broker to read
          pause = Math.min(pause * 2, 2);
          continue;
        }
        if (e.code === "EINTR") continue;
        if (e.code === "EPIPE" || e.code === "ECONNRESET") throw new KvError("other", EOF);
        throw e;
      }
      off += n;
      pause = 0.05;
    }
  }

  read(n) {
    const buf = new Uint8Array(n);
    let off = 0;
    let pause = 0.05;
    while (off < n) {
      let got;
      try {
        got = fs.readSync(this.fd, buf, off, n - off, null);
      } catch (e) {
        if (e.code === "EAGAIN" || e.code === "EWOULDBLOCK") {
          sleepMs(pause);
          pause = Math.min(pause * 2, 2);
          continue;
        }
        if (e.code === "EINTR") continue;
        if (e.code === "ECONNRESET") got = 0;
        else throw e;
      }
      if (got === 0) throw new KvError("other", EOF);
      off += got;
      pause = 0.05;
    }
    return buf;
  }
}

const EMPTY = new Uint8Array(0);
let conn = null;

function connection() {
  if (conn) return conn;
  const text = process.env.MOAT_KV_FD ?? "";
  if (text === "") throw new KvError("access_denied", DISABLED);
  if (!/^[0-9]{1,9}$/.test(text))
    throw new KvError("other", `MOAT_KV_FD is not a file descriptor number: ${JSON.stringify(text)}`);
  conn = new Connection(Number(text));
  return conn;
}

function describe(v) {
  if (v === null) return "null";
  if (typeof v === "object") return v.constructor?.name ?? "object";
  return typeof v;
}

function keyBytes(key) {
  if (typeof key !== "string") throw new TypeError(`a key must be a string, not ${describe(key)}`);
  if (LONE_SURROGATE.test(key)) throw new KvError("invalid", "a key must be valid UTF-8 (it has a lone surrogate)");
  const bytes = encoder.encode(key);
  if (bytes.length === 0) throw new KvError("invalid", "a key must not be empty");
  if (bytes.length > MAX_KEY)
    throw new KvError("invalid", `a key is at most ${MAX_KEY} bytes of UTF-8, this one has ${bytes.length}`);
  if (bytes.includes(0)) throw new KvError("invalid", "a key must not contain NUL");
  return bytes;
}

// As the SDK's Store.set: a Uint8Array is the bytes, a string its UTF-8, any
// other object (null and arrays too) its JSON.
function valueBytes(value) {
  let bytes;
  if (value instanceof Uint8Array) bytes = value;
  else if (typeof value === "string") bytes = encoder.encode(value);
  else if (typeof value === "object") bytes = jsonBytes(value);
  else throw new TypeError(`a value must be a Uint8Array, a string or an object, not ${describe(value)}`);
  if (bytes.length > MAX_FRAME - 5 - MAX_KEY) throw new KvError("invalid", `value too large (${bytes.length} bytes)`);
  return bytes;
}

function jsonBytes(value) {
  const text = JSON.stringify(value);
  if (text === undefined) throw new TypeError(`${describe(value)} has no JSON form`);
  return encoder.encode(text);
}

// The KvError of an ERROR answer: "kind message".
function failure(payload) {
  const text = new TextDecoder().decode(payload); // not fatal: replacement characters
  const space = text.indexOf(" ");
  const kind = space < 0 ? text : text.slice(0, space);
  const message = space < 0 ? "" : text.slice(space + 1);
  if (!kind) return new KvError("other", message || "the key-value broker failed");
  return new KvError(kind, message || kind);
}

function malformed(c, what) {
  c.dead = ["other", `the key-value broker sent a malformed answer (${what})`];
  return new KvError(...c.dead);
}

class Store {
  #conn;
  #label;

  constructor(c, label) {
    this.#conn = c;
    this.#label = label;
  }

  get label() {
    return this.#label;
  }

  #call(op, key, value) {
    const [status, payload] = this.#conn.call(op, key, value);
    if (status === ERROR) throw failure(payload);
    if (status !== OK && status !== NOT_FOUND) throw malformed(this.#conn, `status ${status}`);
    return [status, payload];
  }

  /** The value of `key`, or null when it is absent. */
  get(key) {
    const [status, payload] = this.#call(GET, keyBytes(key));
    return status === NOT_FOUND ? null : payload;
  }

  /** Stores `value` (a Uint8Array, or a string as UTF-8) under `key`. */
  set(key, value) {
    const k = keyBytes(key);
    this.#call(SET, k, valueBytes(value));
  }

  /** Removes `key`; an absent key is not an error. */
  delete(key) {
    this.#call(DELETE, keyBytes(key));
  }

  /** true when `key` has a value. */
  exists(key) {
    const [status, payload] = this.#call(EXISTS, keyBytes(key));
    if (status === NOT_FOUND) return false;
    if (payload.length !== 1 || payload[0] > 1) throw malformed(this.#conn, "EXISTS");
    return payload[0] === 1;
  }

  /** Every key of the store, in byte order. */
  getKeys() {
    const [status, payload] = this.#call(KEYS);
    if (status === NOT_FOUND) return [];
    const view = new DataView(payload.buffer, payload.byteOffset, payload.byteLength);
    const keys = [];
    let pos = 0;
    try {
      while (pos < payload.length) {
        if (payload.length - pos < 4) throw new RangeError();
        const n = view.getUint32(pos, true);
        pos += 4;
        if (n > payload.length - pos) throw new RangeError();
        keys.push(decoder.decode(payload.subarray(pos, pos + n)));
        pos += n;
      }
    } catch {
      throw malformed(this.#conn, "KEYS");
    }
    return keys;
  }

  /** The value of `key` parsed as JSON (UTF-8). As in the SDK, an absent
   * key parses as "" and throws a SyntaxError. */
  getJson(key) {
    return JSON.parse(new TextDecoder().decode(this.get(key) ?? EMPTY));
  }

  /** Stores JSON.stringify(value) under `key`. */
  setJson(key, value) {
    this.set(key, jsonBytes(value));
  }
}

/** Opens the store named `label`; only "default" exists here, any other
 * name throws a KvError (kind "no_such_store"). */
export function open(label) {
  if (typeof label !== "string") throw new TypeError(`a store label must be a string, not ${describe(label)}`);
  const c = connection();
  let name;
  try {
    name = keyBytes(label);
  } catch {
    throw new KvError("no_such_store", `no key-value store is named ${JSON.stringify(label)}`);
  }
  const [status, payload] = c.call(OPEN, name);
  if (status === ERROR) throw failure(payload);
  if (status !== OK) throw malformed(c, `OPEN status ${status}`);
  return new Store(c, label);
}

/** Opens the store "default". */
export function openDefault() {
  return open("default");
}
