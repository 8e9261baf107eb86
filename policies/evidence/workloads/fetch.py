# curl-like workload for the seccomp evidence (policies/evidence/README.md):
# an HTTP peer on lo in a thread, fetched with urllib (GET, POST, a redirect),
# with http.client and through a raw socket with a timeout. Prints "ok".
import http.client
import http.server
import json
import socket
import threading
import urllib.request


class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path == "/redirect":
            self.send_response(302)
            self.send_header("Location", "/json")
            self.end_headers()
            return
        body = json.dumps({"path": self.path}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        n = int(self.headers["Content-Length"])
        data = self.rfile.read(n)
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *a):
        pass


srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
port = srv.server_address[1]
threading.Thread(target=srv.serve_forever, daemon=True).start()
base = f"http://127.0.0.1:{port}"
with urllib.request.urlopen(base + "/a", timeout=10) as r:
    assert json.load(r) == {"path": "/a"}
with urllib.request.urlopen(base + "/redirect", timeout=10) as r:
    assert json.load(r) == {"path": "/json"}
req = urllib.request.Request(base + "/p", data=b"x" * 70000, method="POST")
with urllib.request.urlopen(req, timeout=10) as r:
    assert len(r.read()) == 70000
c = http.client.HTTPConnection("localhost", port, timeout=10)
c.request("GET", "/c")
assert c.getresponse().status == 200
c.close()
s = socket.create_connection(("127.0.0.1", port), timeout=5)
s.sendall(b"GET /raw HTTP/1.0\r\n\r\n")
assert b"/raw" in s.recv(65536) + s.recv(65536)
s.close()
socket.getaddrinfo("localhost", port)
srv.shutdown()
print("ok")
