// Bootstrap for fetch-style JS/TS handlers run by `moat serve`.
//
// The service bundles `import { serve } from "/opt/moat/runtime/js/handler.mjs";
// import h from "./handler.ts"; await serve(h);` and runs it with the request as
// JSON on stdin. The response goes out on fd 1, framed as docs/SERVE.md ("The
// handler protocol") describes; everything the program prints goes to stderr.
//
// This module is imported before the user's, so the redirection below is in
// place before any user code runs.
import fs from "node:fs";

const OUT = 1;
const MAX_FRAME = 64 * 1024; // bigger chunks are sent as several frames
const MAX_ERROR = 500; // bytes of an error line's text
const encoder = new TextEncoder();

// process.stdout becomes stderr. Redefining the getter (rather than only
// patching write) also keeps Node from ever wrapping fd 1 in a stream.
const stderr = process.stderr;
try {
  Object.defineProperty(process, "stdout", { configurable: true, enumerable: true, get: () => stderr });
} catch {
  process.stdout.write = stderr.write.bind(stderr);
}
for (const name of ["log", "info", "debug"]) console[name] = console.error.bind(console);

const state = { done: false, broken: false };

function sleepMs(ms) {
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
}

function writeAll(buf) {
  let off = 0;
  try {
    while (off < buf.length) {
      try {
        off += fs.writeSync(OUT, buf, off, buf.length - off);
      } catch (e) {
        if (e.code !== "EAGAIN") throw e;
        sleepMs(1); // fd 1 may be non-blocking if something opened it as a stream
      }
    }
  } catch (e) {
    state.broken = true;
    throw e;
  }
}

function writeChunk(chunk) {
  let bytes;
  if (typeof chunk === "string") bytes = encoder.encode(chunk);
  else if (chunk instanceof Uint8Array) bytes = chunk;
  else if (ArrayBuffer.isView(chunk)) bytes = new Uint8Array(chunk.buffer, chunk.byteOffset, chunk.byteLength);
  else if (chunk instanceof ArrayBuffer) bytes = new Uint8Array(chunk);
  else throw new TypeError(`a body chunk must be a Uint8Array or string, not ${describe(chunk)}`);
  for (let i = 0; i < bytes.length; i += MAX_FRAME) {
    const part = bytes.subarray(i, i + MAX_FRAME);
    writeAll(Buffer.concat([Buffer.from(`${part.length}\n`), part]));
  }
}

function describe(v) {
  if (v === null) return "null";
  if (typeof v === "object") return v.constructor?.name ?? "object";
  return typeof v;
}

function errorText(e) {
  let text;
  try {
    if (e instanceof Error || (e && typeof e === "object" && "message" in e)) {
      const name = String(e.name || "Error");
      text = e.message ? `${name}: ${e.message}` : name;
    } else {
      text = `Error: ${String(e)}`;
    }
  } catch {
    text = "Error";
  }
  text = text.replace(/[\x00-\x1f\x7f]/g, " ").replace(/\s+/g, " ").trim();
  let bytes = Buffer.from(text, "utf8");
  if (bytes.length > MAX_ERROR) {
    // Cut on a character boundary.
    let cut = MAX_ERROR - 3;
    while (cut > 0 && (bytes[cut] & 0xc0) === 0x80) cut--;
    bytes = Buffer.concat([bytes.subarray(0, cut), Buffer.from("...")]);
  }
  return bytes;
}

function fail(e) {
  try {
    stderr.write(`${e?.stack ?? String(e)}\n`);
  } catch {}
  process.exitCode = 1;
  if (state.done || state.broken) return;
  state.done = true;
  try {
    writeAll(Buffer.concat([Buffer.from("error "), errorText(e), Buffer.from("\n")]));
  } catch {}
}

// An exception nothing catches (one thrown while the user's module is
// evaluated, an unhandled rejection) still ends the stream with an error line;
// Node then exits as it always would.
process.on("uncaughtExceptionMonitor", (e) => {
  if (state.done || state.broken) return;
  state.done = true;
  try {
    writeAll(Buffer.concat([Buffer.from("error "), errorText(e), Buffer.from("\n")]));
  } catch {}
});

function buildRequest(input) {
  if (!input || typeof input !== "object" || Array.isArray(input))
    throw new TypeError("the request is not a JSON object");
  const method = input.method || "GET";
  const init = { method, headers: input.headers || [] };
  const upper = method.toUpperCase();
  if (upper !== "GET" && upper !== "HEAD" && input.body != null) init.body = input.body;
  return new Request(input.url || "http://localhost/", init);
}

function headerPairs(headers) {
  if (headers == null) return [];
  let entries;
  if (typeof Headers !== "undefined" && headers instanceof Headers) entries = [...headers];
  else if (Array.isArray(headers)) entries = headers;
  else if (typeof headers === "object") entries = Object.entries(headers);
  else throw new TypeError(`headers must be Headers, an object or a list of pairs, not ${describe(headers)}`);
  return entries.map((pair) => {
    if (!Array.isArray(pair) || pair.length !== 2 || typeof pair[0] !== "string" || typeof pair[1] !== "string")
      throw new TypeError("headers must be (name, value) pairs of strings");
    return [pair[0], pair[1]];
  });
}

// The status, header pairs and body of a Response, or of an object shaped
// like one ({status, headers, body}), checked before anything is written.
function unpack(response) {
  if (!(response instanceof Response) && !(response && typeof response === "object" && "status" in response))
    throw new TypeError(`fetch() must return a Response, not ${describe(response)}`);
  const { status, body } = response;
  if (!Number.isInteger(status)) throw new TypeError(`status must be an integer, not ${describe(status)}`);
  const headers = headerPairs(response.headers);
  if (body != null && typeof body !== "string" && !ArrayBuffer.isView(body) && !(body instanceof ArrayBuffer)
      && typeof body.getReader !== "function" && typeof body[Symbol.asyncIterator] !== "function")
    throw new TypeError(`body must be a ReadableStream, string or bytes, not ${describe(body)}`);
  return { status, headers, body };
}

async function sendBody(body) {
  if (body == null) return;
  if (typeof body.getReader === "function") {
    const reader = body.getReader();
    for (;;) {
      const { done, value } = await reader.read();
      if (done) return;
      writeChunk(value);
    }
  }
  if (typeof body === "string" || ArrayBuffer.isView(body) || body instanceof ArrayBuffer) {
    writeChunk(body);
    return;
  }
  for await (const chunk of body) writeChunk(chunk);
}

export async function serve(mod) {
  try {
    const request = buildRequest(JSON.parse(fs.readFileSync(0, "utf8")));
    if (!mod || (typeof mod !== "object" && typeof mod !== "function") || typeof mod.fetch !== "function")
      throw new TypeError("default export has no fetch(request) method");
    const { status, headers, body } = unpack(await mod.fetch(request));
    writeAll(Buffer.from(`MOAT/1 ${JSON.stringify({ status, headers })}\n`));
    await sendBody(body);
    writeAll(Buffer.from("end\n"));
    state.done = true;
  } catch (e) {
    fail(e);
  }
}
