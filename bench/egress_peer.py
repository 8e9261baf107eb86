# The public peer of bench/egress.sh (run in its network namespace):
#   python3 egress_peer.py ADDR,ADDR... STREAM_PORT ECHO_PORT
# STREAM_PORT: the client sends one line "<bytes>\n" (after one TLS record,
# skipped, when its first byte is 22); the peer answers with that many zero
# bytes (sendfile from a 64 MiB memfd) and closes.
# ECHO_PORT: echoes whatever it reads (the 256-connection check).
# SINK_PORT (optional 4th argument): holds every connection and never reads,
# with small receive buffers (a peer on another machine, whose buffers are
# not this host's): the socket-memory figure.
# Prints "ready" once every socket is listening.
import os, socket, sys, threading

CHUNK = 64 << 20
addrs, stream_port, echo_port = sys.argv[1].split(','), int(sys.argv[2]), int(sys.argv[3])
sink_port = int(sys.argv[4]) if len(sys.argv) > 4 else 0
held = []
zeros = os.memfd_create('egress-zeros')
os.ftruncate(zeros, CHUNK)


def take(c, n):
    d = b''
    while len(d) < n:
        b = c.recv(n - len(d))
        if not b:
            raise OSError('closed')
        d += b
    return d


def stream(c):
    try:
        line = take(c, 1)
        if line == b'\x16':  # a TLS record first (the client's tunnel mode): skipped
            rec = take(c, 4)
            take(c, rec[2] << 8 | rec[3])
            line = b''
        while not line.endswith(b'\n') and len(line) < 64:
            b = c.recv(64)
            if not b:
                return
            line += b
        left = int(line)
        while left > 0:
            off = 0
            while off < CHUNK and left > 0:
                n = os.sendfile(c.fileno(), zeros, off, min(CHUNK - off, left, 1 << 24))
                if n <= 0:
                    return
                off += n
                left -= n
    except (OSError, ValueError):
        pass
    finally:
        c.close()


def echo(c):
    try:
        while True:
            b = c.recv(65536)
            if not b:
                break
            c.sendall(b)
    except OSError:
        pass
    finally:
        c.close()


def listen(addr, port, fn, rcvbuf=0):
    fam = socket.AF_INET6 if ':' in addr else socket.AF_INET
    s = socket.socket(fam, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if rcvbuf:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.bind((addr, port))
    s.listen(1024)

    def loop():
        while True:
            c, _ = s.accept()
            if fn is None:
                held.append(c)
                continue
            threading.Thread(target=fn, args=(c,), daemon=True).start()
    threading.Thread(target=loop, daemon=True).start()


for a in addrs:
    listen(a, stream_port, stream)
    listen(a, echo_port, echo)
    if sink_port:
        listen(a, sink_port, None, 4096)
print('ready', flush=True)
threading.Event().wait()
