#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz harnesses (tests/fuzz/corpus/NAME/):
a handful of small valid and invalid inputs each. Rerun after changing it;
`make fuzz` reads the seeds and never writes into this directory."""
import json
import os
import shutil
import struct

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")
seeds = {}


def add(harness, name, data):
    if isinstance(data, str):
        data = data.encode()
    seeds.setdefault(harness, {})[name] = data


# ---- request: moat_request_parse_json --------------------------------------
add("request", "minimal", '{"code":"print(6*7)"}')
add("request", "full", json.dumps({
    "code": "print(6*7)", "language": "python", "timeout": 30000,
    "env": {"NAME": "v"}, "files": {"rel/path.txt": "content"}, "stdin": "",
    "network": False, "memoryMb": 512, "cpus": 1, "pidsLimit": 100,
    "strictLimits": False, "maxOutputBytes": 1048576,
    "allowedHosts": ["https://api.example.com", "http://*.example.org:8080"],
    "allowedCidrs": ["198.51.100.0/24"], "outputs": ["out/*.png", "report.txt"]}))
add("request", "bad-nul-escape", '{"code":"a\\u0000b"}')
add("request", "bad-path", '{"code":"x","files":{"../etc/passwd":"x"}}')
add("request", "bad-env", '{"code":"x","env":{"1A":"v"}}')
add("request", "bad-host", '{"code":"x","allowedHosts":["https://*"]}')
add("request", "bad-duplicate", '{"code":"x","code":"y"}')
add("request", "bad-trailing", '{"code":"x"} x')
add("request", "bad-deep", "[" * 200 + "]" * 200)
add("request", "argv", json.dumps({"argv": ["sh", "-c", "echo \"$@\"", "", "a b", "\u00e9"],
                                    "env": {"A": "1"}, "files": {"main.py": "x"},
                                    "outputs": ["out/*"]}))
add("request", "bad-argv-code", '{"argv":["ls"],"code":"x"}')
add("request", "bad-argv-nul", '{"argv":["ls","a\\u0000b"]}')

# ---- kv_broker: moat_kv_broker_feed ------------------------------------------
def kvreq(op, key=b"", val=b""):
    body = bytes([op]) + struct.pack("<I", len(key)) + key + val
    return struct.pack("<I", len(body)) + body


add("kv_broker", "session", b"\x07" + kvreq(6, b"default") + kvreq(2, b"k", b"v") +
    kvreq(1, b"k") + kvreq(4, b"k") + kvreq(5) + kvreq(3, b"k"))
add("kv_broker", "too-large", b"\x40" + kvreq(2, b"k", b"x" * 600) + kvreq(1, b"k"))
add("kv_broker", "bad-op", b"\x01" + kvreq(9, b"k"))
add("kv_broker", "bad-key", b"\x10" + kvreq(1, b"a\x00b") + kvreq(2, b"", b"v"))

# ---- seccomp_policy: sc_policy_parse + sc_compile ----------------------------
add("seccomp_policy", "minimal", json.dumps({
    "defaultAction": "SCMP_ACT_ERRNO",
    "syscalls": [{"names": ["read", "write", "exit_group"], "action": "SCMP_ACT_ALLOW"}]}))
add("seccomp_policy", "args-and-filters", json.dumps({
    "defaultAction": "SCMP_ACT_ERRNO", "defaultErrnoRet": 1,
    "architectures": ["SCMP_ARCH_X86_64", "SCMP_ARCH_X86"],
    "archMap": [{"architecture": "SCMP_ARCH_X86_64", "subArchitectures": ["SCMP_ARCH_X86"]}],
    "flags": ["SECCOMP_FILTER_FLAG_LOG"],
    "syscalls": [
        {"names": ["personality"], "action": "SCMP_ACT_ALLOW",
         "args": [{"index": 0, "value": 0, "op": "SCMP_CMP_EQ"}]},
        {"names": ["clone"], "action": "SCMP_ACT_ALLOW",
         "args": [{"index": 0, "value": 2114060288, "valueTwo": 0, "op": "SCMP_CMP_MASKED_EQ"}],
         "excludes": {"caps": ["CAP_SYS_ADMIN"], "arches": ["s390x"]}},
        {"names": ["ptrace"], "action": "SCMP_ACT_ERRNO", "errnoRet": 38,
         "includes": {"minKernel": "4.8"}},
        {"name": "kill", "action": "SCMP_ACT_KILL_PROCESS", "comment": "c"}]}))
add("seccomp_policy", "bad-action", '{"defaultAction":"SCMP_ACT_NOPE","syscalls":[]}')
add("seccomp_policy", "bad-name", json.dumps({
    "defaultAction": "SCMP_ACT_ERRNO",
    "syscalls": [{"names": ["no_such_call"], "action": "SCMP_ACT_ALLOW"}]}))
add("seccomp_policy", "bad-masked-eq", json.dumps({
    "defaultAction": "SCMP_ACT_ERRNO",
    "syscalls": [{"names": ["clone"], "action": "SCMP_ACT_ALLOW",
                  "args": [{"index": 0, "value": 1, "valueTwo": 2, "op": "SCMP_CMP_MASKED_EQ"}]}]}))
add("seccomp_policy", "bad-index", json.dumps({
    "defaultAction": "SCMP_ACT_ERRNO",
    "syscalls": [{"names": ["read"], "action": "SCMP_ACT_ALLOW",
                  "args": [{"index": 6, "value": 0, "op": "SCMP_CMP_EQ"}]}]}))
add("seccomp_policy", "bad-json", '{"defaultAction": "SCMP_ACT_ERRNO",\n "syscalls": [')
with open(os.path.join(os.path.dirname(ROOT), "..", "..", "policies", "default.json"), "rb") as f:
    add("seccomp_policy", "default-policy", f.read())

# ---- allow: allowedHosts / allowedCidrs entries, hosts ------------------------
for i, s in enumerate([
        "https://api.example.com", "http://*.example.org:8080", "https://example.com:*",
        "http://[2001:db8::1]:8080", "https://0x7f.1", "http://127.1", "HTTPS://Example.COM.",
        "198.51.100.0/24", "fd00::/8", "192.0.2.1", "[::ffff:127.0.0.1]",
        "https://*", "ftp://example.com", "https://example.com/path", "https://user@host",
        "https://ex ample.com", "https://example.com:0", "https://example.com:65536",
        "http://1.2.3.4.5", "10.0.0.0/33", "https://xn--bcher-kva.example"]):
    add("allow", "%02d" % i, s)

# ---- proxy: request heads, good and refused ----------------------------------
H = "\r\n"
add("proxy", "get", "GET http://example.com/x?y=1 HTTP/1.1" + H + "Host: example.com" + H +
    "User-Agent: t" + H + H)
add("proxy", "get-port-10", "GET http://example.com:8080/ HTTP/1.0" + H + H)
add("proxy", "post-body", "POST http://example.com/p HTTP/1.1" + H + "Host: example.com:80" + H +
    "Content-Length: 5" + H + "Content-Length: 5" + H + H + "hello")
add("proxy", "connect", "CONNECT example.com:443 HTTP/1.1" + H + "Host: example.com:443" + H + H)
add("proxy", "connect-ipv6", "CONNECT [2001:db8::1]:443 HTTP/1.1" + H + H)
add("proxy", "refuse-transfer-encoding", "POST http://example.com/ HTTP/1.1" + H +
    "Host: example.com" + H + "Transfer-Encoding: chunked" + H + H + "5\r\nhello\r\n0\r\n\r\n")
add("proxy", "refuse-conflicting-length", "POST http://example.com/ HTTP/1.1" + H +
    "Host: example.com" + H + "Content-Length: 5" + H + "Content-Length: 6" + H + H + "hello!")
add("proxy", "refuse-bad-length", "POST http://example.com/ HTTP/1.1" + H +
    "Host: example.com" + H + "Content-Length: -1" + H + H)
add("proxy", "refuse-folded", "GET http://example.com/ HTTP/1.1" + H + "Host: example.com" + H +
    "X-A: one" + H + " two" + H + H)
add("proxy", "refuse-bare-lf", "GET http://example.com/ HTTP/1.1\nHost: example.com" + H + H)
add("proxy", "refuse-bare-cr", "GET http://example.com/ HTTP/1.1" + H + "Host: exa\rmple.com" + H + H)
add("proxy", "refuse-two-hosts", "GET http://example.com/ HTTP/1.1" + H + "Host: example.com" + H +
    "Host: evil.com" + H + H)
add("proxy", "refuse-host-mismatch", "GET http://example.com/ HTTP/1.1" + H + "Host: evil.com" + H + H)
add("proxy", "refuse-no-host-11", "GET http://example.com/ HTTP/1.1" + H + H)
add("proxy", "refuse-https-url", "GET https://example.com/ HTTP/1.1" + H + "Host: example.com" + H + H)
add("proxy", "refuse-origin-form", "GET / HTTP/1.1" + H + "Host: example.com" + H + H)
add("proxy", "refuse-userinfo", "GET http://u@example.com/ HTTP/1.1" + H + "Host: example.com" + H + H)
add("proxy", "refuse-http2", "GET http://example.com/ HTTP/2.0" + H + H)
add("proxy", "refuse-connect-no-port", "CONNECT example.com HTTP/1.1" + H + H)

# ---- config: moat.json / aistack.config.json ----------------------------------
add("config", "moat", json.dumps({
    "provider": "native", "timeout": 30000, "memoryMb": 512, "cpus": 1.5, "pidsLimit": 100,
    "network": False, "strictLimits": True, "maxOutputBytes": 65536,
    "policy": "/etc/moat/policy.json", "rootfs": "/var/lib/moat/root",
    "images": {"python": "python:3.12-slim", "js": "node:22"},
    "e2bTemplate": "code-interpreter-v1", "unknownKey": 1,
    "serve": {"default": {"timeout": 10000, "memoryMb": 256, "cpus": 1, "pidsLimit": 64},
              "max": {"timeout": 60000, "memoryMb": 1024, "cpus": 2, "pidsLimit": 256},
              "allowOpenNetwork": False, "maxResponseBytes": 1048576}}))
add("config", "aistack", json.dumps({"sandbox": {"provider": "docker", "dockerPath": "/usr/bin/docker"},
                                     "other": {"x": 1}}))
add("config", "aistack-empty", '{"agents": []}')
add("config", "bad-provider", '{"provider": "chroot"}')
add("config", "bad-twice", '{"timeout": 1, "timeout": 2}')
add("config", "bad-serve", '{"serve": {"default": {"timeout": 99999999}, "max": {"timeout": 1}}}')
add("config", "bad-cpus", '{"cpus": -1}')
add("config", "bad-json", '{"provider": ')

# ---- outputs: the stream pid 1 writes (outputs.c struct out_hdr) --------------
def rec(path, data, flags=0, size=None):
    path = path.encode() if isinstance(path, str) else path
    size = len(data) if size is None else size
    return struct.pack("<IIQII", len(path), flags, size, len(data), 0) + path + data


def summary(omitted, too_many=0):
    return struct.pack("<IIQII", 0, 2, omitted, 0, too_many)


add("outputs", "text-and-binary", b"\0" + rec("out/a.txt", b"hello\n") +
    rec("out/b.png", b"\x89PNG\r\n\x1a\n\0\0\xff") + summary(0))
add("outputs", "truncated", b"\0" + rec("big.txt", b"x" * 64, flags=1, size=1 << 21) + summary(3, 1))
add("outputs", "cut", b"\1" + rec("a", b"abc")[:-1])
add("outputs", "odd-names", b"\0" + rec(b"\xff\xfe\"\\\n", b"\xe2\x82") + rec("\u00e9t\u00e9", "\u00e9".encode()))
add("outputs", "bad-length", b"\0" + struct.pack("<IIQII", 4096, 0, 1, 1, 0) + b"x" * 8)
add("outputs", "empty", b"\0")

# ---- envelope: POST /py/... and /ts/... bodies (first byte: 0 py, 1 ts) -------
add("envelope", "py-script", b"\0" + json.dumps({"code": "print(1)", "sandboxId": "s1"}).encode())
add("envelope", "py-handler", b"\0" + json.dumps({
    "code": "def handle_request(req):\n    return 200\n", "sandboxId": "s1",
    "allowedHosts": ["https://example.com"], "kvEnabled": False,
    "input": {"method": "POST", "path": "/a?b=1", "headers": {"X-A": "1"}, "body": "hi"}}).encode())
add("envelope", "ts-handler", b"\1" + json.dumps({
    "code": "export default function (r) { return new Response('x') }", "sandboxId": "abc"}).encode())
add("envelope", "bad-kv", b"\0" + json.dumps({"code": "x", "sandboxId": "s", "kvEnabled": True}).encode())
add("envelope", "bad-key", b"\1" + json.dumps({"code": "x", "sandboxId": "s", "nope": 1}).encode())
add("envelope", "bad-input", b"\0" + json.dumps({"code": "x", "sandboxId": "s",
                                                  "input": {"method": "G T", "headers": {"a": 1}}}).encode())
add("envelope", "bad-nul", b"\0" + b'{"code":"\\u0000","sandboxId":"s"}')

# ---- frame: handler responses (2 bytes cap/16, 1 byte piece size - 1) ---------
def frame(cap16, piece, s):
    return struct.pack(">H", cap16) + bytes([piece]) + (s.encode() if isinstance(s, str) else s)


add("frame", "ok", frame(64, 255, 'MOAT/1 {"status":200,"headers":[["content-type","text/plain"]]}\n'
                     "5\nhello3\n!!!end\n"))
add("frame", "ok-split", frame(64, 2, 'MOAT/1 {"status":404}\n2\nno\nend\n'))
add("frame", "dropped-headers", frame(64, 7, 'MOAT/1 {"status":200,"headers":[["Content-Length","9"],'
                                      '["X-A","b"]]}\n1\nxend\n'))
add("frame", "error-after-head", frame(64, 255, 'MOAT/1 {"status":200}\n3\nabcerror boom\n'))
add("frame", "error-first", frame(64, 255, "error Traceback\x01\x7f\n"))
add("frame", "bad-status", frame(64, 255, 'MOAT/1 {"status":99}\nend\n'))
add("frame", "bad-header", frame(64, 255, 'MOAT/1 {"status":200,"headers":[["a b","c\\r\\n"]]}\nend\n'))
add("frame", "over-cap", frame(0, 255, 'MOAT/1 {"status":200}\n17\nxxxxxxxxxxxxxxxxxend\n'))
add("frame", "bad-length", frame(64, 255, 'MOAT/1 {"status":200}\n05\nhelloend\n'))
add("frame", "after-end", frame(64, 255, 'MOAT/1 {"status":200}\nend\nmore'))
add("frame", "no-end", frame(64, 255, 'MOAT/1 {"status":200}\n'))

# ---- dns: queries from the sandbox ---------------------------------------------
def qname(name):
    out = b""
    for label in name.split(".") if name else []:
        out += bytes([len(label)]) + label.encode()
    return out + b"\0"


def query(name, qtype=1, qid=0x1234, flags=0x0100, an=0, ns=0, ar=0, extra=b""):
    return struct.pack(">HHHHHH", qid, flags, 1, an, ns, ar) + qname(name) + \
        struct.pack(">HH", qtype, 1) + extra


opt = b"\0" + struct.pack(">HHIH", 41, 1232, 0, 0)
add("dns", "a", query("example.com") + bytes([5]))
add("dns", "aaaa", query("Example.COM", qtype=28))
add("dns", "edns", query("api.example.com", ar=1, extra=opt))
add("dns", "root", query(""))
add("dns", "bad-pointer", struct.pack(">HHHHHH", 1, 0x0100, 1, 0, 0, 0) + b"\xc0\x0c" + struct.pack(">HH", 1, 1))
add("dns", "bad-response", query("example.com", flags=0x8180))
add("dns", "bad-trailing", query("example.com") + b"\0")
add("dns", "short", b"\x12\x34\x01")

# ---- sniff: the first bytes of a connection -------------------------------------
def client_hello(names, exts_extra=b""):
    exts = b""
    for n in names:
        sn = b"\0" + struct.pack(">H", len(n)) + n.encode()
        lst = struct.pack(">H", len(sn)) + sn
        exts += struct.pack(">HH", 0, len(lst)) + lst
    exts += exts_extra
    body = b"\x03\x03" + b"\x11" * 32 + b"\0" + struct.pack(">H", 2) + b"\x13\x01" + b"\x01\0" + \
        struct.pack(">H", len(exts)) + exts
    hs = b"\x01" + struct.pack(">I", len(body))[1:] + body
    return b"\x16\x03\x01" + struct.pack(">H", len(hs)) + hs


add("sniff", "tls-sni", client_hello(["Example.com."]))
add("sniff", "tls-no-sni", client_hello([]))
add("sniff", "tls-two-sni", client_hello(["a.example", "b.example"]))
add("sniff", "tls-alpn", client_hello(["api.example.com"], struct.pack(">HHH", 16, 5, 3) + b"\x02h2"))
add("sniff", "http", "GET /x HTTP/1.1\r\nHost: Example.com:8080\r\nAccept: */*\r\n\r\n")
add("sniff", "http-ipv6", "OPTIONS * HTTP/1.0\r\nHost: [2001:db8::1]:80\r\n\r\nbody")
add("sniff", "http-no-host", "GET / HTTP/1.0\r\n\r\n")
add("sniff", "http-two-hosts", "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n")
add("sniff", "http-absolute", "GET http://a/ HTTP/1.1\r\nHost: a\r\n\r\n")
add("sniff", "http-folded", "GET / HTTP/1.1\r\nHost: a\r\n b\r\n\r\n")
add("sniff", "http-partial", "GET / HTTP/1.1\r\nHost: a")
add("sniff", "ssh", "SSH-2.0-OpenSSH_9.2\r\n")

for harness, files in seeds.items():
    d = os.path.join(ROOT, harness)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    for name, data in files.items():
        with open(os.path.join(d, name), "wb") as f:
            f.write(data)
print("seeds: " + ", ".join("%s %d" % (h, len(f)) for h, f in sorted(seeds.items())))
