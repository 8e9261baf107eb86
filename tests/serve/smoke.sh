#!/bin/sh
# A hand-run smoke test of `moat serve` (docs/SERVE.md): the seed's curl
# examples and the main error cases, one curl each, printing the HTTP status
# next to the one expected, and the body.
#
#   moat serve &                                 # rootless: $XDG_RUNTIME_DIR/moat.sock
#   SOCKET=$XDG_RUNTIME_DIR/moat.sock sh tests/serve/smoke.sh
#   sudo moat serve &                            # root: /run/moat/moat.sock
#   sudo SOCKET=/run/moat/moat.sock sh tests/serve/smoke.sh
#   moat serve --listen 127.0.0.1:3000 --token-file F &   # TCP needs a token
#   TOKEN=$(cat F) sh tests/serve/smoke.sh       # BASE=http://127.0.0.1:3000
#   (or moat serve --listen 127.0.0.1:3000 --no-auth &: no TOKEN)
#
# It checks nothing by itself: read the "want" column. Exit status 0 unless
# curl itself could not run.
set -u
BASE=${BASE:-http://127.0.0.1:3000}
TOKEN=${TOKEN:-}
SOCKET=${SOCKET:-}
if [ -n "$SOCKET" ]; then
	BASE=http://localhost
fi

# req WANT METHOD PATH [curl args...]: one request; prints "got want path" and
# the first 300 bytes of the body.
req() {
	want=$1 method=$2 path=$3
	shift 3
	set -- -sS --noproxy '*' -X "$method" -o /tmp/moat-smoke.$$ -w '%{http_code}' "$@"
	[ -n "$SOCKET" ] && set -- --unix-socket "$SOCKET" "$@"
	[ -n "$TOKEN" ] && set -- -H "Authorization: Bearer $TOKEN" "$@"
	got=$(curl "$@" "$BASE$path")
	printf '%s (want %s)  %s %s\n    %s\n' "$got" "$want" "$method" "$path" \
		"$(head -c 300 /tmp/moat-smoke.$$ | tr '\n' ' ')"
	rm -f /tmp/moat-smoke.$$
}

echo "== the seed's examples"
# Python script: {"stdout":"42\n","stderr":"","error":null,...}
req 200 POST /py/run -d '{"code":"print(6 * 7)","sandboxId":"demo"}'
# TypeScript handler with input: the body is http://localhost/hello
req 200 POST /ts/run -d '{
  "code":"export default { async fetch(r) { return new Response(r.url) } }",
  "sandboxId":"demo", "input":{"path":"/hello"}}'

echo "== handlers"
# Python handler: 201, header x-a: b, body "hi there"
req 201 POST /py/run -i -d '{"code":"from spin_sdk.http import Response\ndef handle_request(request):\n    return Response(201, {\"x-a\": \"b\"}, b\"hi \" + request.body)\n","sandboxId":"demo","input":{"method":"POST","body":"there"}}'
# Python streaming handler: chunk0;chunk1;chunk2;
req 200 POST /py/run -d '{"code":"def handle_request(request):\n    return (200, {\"content-type\": \"text/plain\"}, (f\"chunk{i};\" for i in range(3)))\n","sandboxId":"demo"}'
# A generator that raises after its first chunk: curl reports a truncated transfer (18/56)
req 200 POST /py/run -d '{"code":"def handle_request(request):\n    def g():\n        yield b\"one;\"\n        raise RuntimeError(\"boom\")\n    return (200, {}, g())\n","sandboxId":"demo"}'
# A handler that raises before its head: 500 with the script-shaped JSON
req 500 POST /py/run -d '{"code":"def handle_request(request):\n    raise ValueError(\"nope\")\n","sandboxId":"demo"}'

echo "== scripts"
# exit 3: error "exit code 3: bad"
req 200 POST /py/run -d '{"code":"import sys\nprint(\"bad\", file=sys.stderr)\nsys.exit(3)","sandboxId":"demo"}'
# 300 KiB of output: stdout cut at 262144 bytes, stdoutTruncated true
req 200 POST /py/run -d '{"code":"print(\"x\" * 307200)","sandboxId":"demo"}'
# JavaScript script on /ts/
req 200 POST /ts/run -d '{"code":"console.log(6 * 7)","sandboxId":"demo"}'

echo "== /v1/run (the moat exec contract)"
req 200 POST /v1/run -d '{"language":"python","code":"print(42)"}'
# above the operator's max: 403 SandboxPolicyError naming timeout
req 403 POST /v1/run -d '{"language":"python","code":"print(1)","timeout":600000}'
# open network, not allowed by default: 403
req 403 POST /v1/run -d '{"language":"python","code":"print(1)","network":true}'
# unknown language: 400
req 400 POST /v1/run -d '{"language":"cobol","code":"x"}'

echo "== envelope errors"
req 400 POST /py/run -d '{"code":'                                        # malformed JSON
req 400 POST /py/run -d '{"code":42,"sandboxId":"a"}'                      # code not a string
req 400 POST /py/run -d '{"code":"print(1)"}'                              # no sandboxId
req 400 POST /py/run -d '{"code":"print(1)","sandboxId":""}'               # empty sandboxId
req 400 POST /py/run -d '{"code":"print(1)","sandboxId":"a","x":1}'        # unknown key
req 400 POST /py/run -d '{"code":"print(1)","sandboxId":"a","allowedHosts":["10.0.0.0/8"]}'
req 400 POST /py/run -d '{"code":"print(1)","sandboxId":"a","allowedHosts":["*"]}'
req 400 POST /py/run -d '{"code":"print(1)","sandboxId":"a","allowedHosts":["https://*"]}'
req 400 POST /py/run -d '{"code":"print(1)","sandboxId":"a","allowedHosts":["https://a.com:1-5"]}'
req 400 POST /py/run -d '{"code":"print(1)","sandboxId":"a","allowedHosts":["ftp://x"]}'
req 501 POST /py/run -d '{"code":"print(1)","sandboxId":"a","kvEnabled":true}'

echo "== size limits"
tmp=$(mktemp)
# code of 5 MiB + 1: 413
{ printf '{"code":"#'; head -c 5242880 /dev/zero | tr '\0' x; printf '","sandboxId":"a"}'; } >"$tmp"
req 413 POST /py/run --data-binary @"$tmp"
# a body over 6 MiB: 413
{ printf '{"code":"print(1)","sandboxId":"a","input":{"body":"'; head -c 6400000 /dev/zero | tr '\0' y; printf '"}}'; } >"$tmp"
req 413 POST /py/run --data-binary @"$tmp"
rm -f "$tmp"

echo "== routes"
req 200 GET /healthz
req 200 GET /metrics
req 404 GET /nope
req 405 GET /py/run -i                                                     # with Allow: POST
if [ -n "$TOKEN" ]; then
	echo "== auth (TOKEN is set: these go without it / with a wrong one)"
	saved=$TOKEN
	TOKEN=
	req 401 POST /py/run -d '{"code":"print(1)","sandboxId":"a"}'
	req 200 GET /healthz
	TOKEN=wrong-token-000000000000
	req 401 POST /py/run -d '{"code":"print(1)","sandboxId":"a"}'
	TOKEN=$saved
fi
exit 0
