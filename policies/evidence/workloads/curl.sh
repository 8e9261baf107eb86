# curl workload for the seccomp evidence: python's http.server on lo, fetched
# with curl (GET, HEAD, a POST from a file, a download to a file). Prints "ok".
set -eu
cd /tmp
mkdir -p www && echo hello > www/index.html
python3 -m http.server 8765 --bind 127.0.0.1 --directory www >/dev/null 2>&1 &
srv=$!
for _ in $(seq 50); do curl -s -o /dev/null http://127.0.0.1:8765/ && break; sleep 0.1; done
test "$(curl -fsS http://127.0.0.1:8765/index.html)" = hello
curl -fsSI http://localhost:8765/ >/dev/null
head -c 100000 /dev/urandom > blob
curl -s -o /dev/null -X POST --data-binary @blob http://127.0.0.1:8765/ || true
curl -fsS -o got.html --max-time 10 http://127.0.0.1:8765/index.html
cmp got.html www/index.html
kill "$srv"
wait "$srv" 2>/dev/null || true
echo ok
