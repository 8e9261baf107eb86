# The client of bench/egress.sh; the same file runs bare, under pasta and as
# moat's program. Environment: EGRESS_HOST, EGRESS_PORT, and either
# EGRESS_BYTES (download that many bytes from the stream port; prints
# "egress-bytes <n> seconds <s> MBps <x>"; with EGRESS_TUNNEL=1 through the
# HTTPS_PROXY's CONNECT tunnel, a ClientHello first) or EGRESS_PARALLEL=N (N
# connections to the echo port, all open at once, 4 KiB each way; prints
# "egress-parallel ok|fail <good>/<N> ..."), or EGRESS_SINK=N (N connections to
# a peer that never reads, each sent to until nothing moves; prints
# "egress-sink conns <n> bytes <b>", then holds them 2 s).
import asyncio, os, socket, struct, time

host, port = os.environ['EGRESS_HOST'], int(os.environ['EGRESS_PORT'])


def hello():
    """A minimal TLS 1.3 ClientHello record without SNI (the target is an IP
    literal): what moat's proxy wants first in a CONNECT tunnel."""
    ext = struct.pack('!HHBH', 0x2b, 3, 2, 0x0304)
    body = (b'\x03\x03' + b'\x11' * 32 + b'\x00' + struct.pack('!HH', 2, 0x1301) + b'\x01\x00' +
            struct.pack('!H', len(ext)) + ext)
    hs = b'\x01' + struct.pack('!I', len(body))[1:] + body
    return b'\x16\x03\x01' + struct.pack('!H', len(hs)) + hs


def tunnel():
    """EGRESS_TUNNEL: through HTTPS_PROXY's CONNECT, a ClientHello first."""
    proxy = os.environ['HTTPS_PROXY'].split('//')[-1].rstrip('/')
    ph, _, pp = proxy.rpartition(':')
    s = socket.create_connection((ph, int(pp)), timeout=60)
    s.sendall(b'CONNECT %s:%d HTTP/1.1\r\nHost: %s:%d\r\n\r\n' % (host.encode(), port, host.encode(), port))
    head = b''
    while b'\r\n\r\n' not in head:
        b = s.recv(1)
        if not b:
            raise SystemExit('proxy closed: %r' % head)
        head += b
    if not head.startswith(b'HTTP/1.1 200'):
        raise SystemExit('CONNECT refused: %r' % head)
    s.sendall(hello())
    return s


def download(total):
    buf = bytearray(1 << 20)
    view = memoryview(buf)
    t0 = time.monotonic()
    s = tunnel() if os.environ.get('EGRESS_TUNNEL') else socket.create_connection((host, port), timeout=60)
    s.sendall(b'%d\n' % total)
    got = 0
    while True:
        n = s.recv_into(view)
        if not n:
            break
        got += n
    s.close()
    dt = time.monotonic() - t0
    print('egress-bytes %d seconds %.3f MBps %.1f' % (got, dt, got / dt / 1e6))
    if got != total:
        raise SystemExit('short read: %d of %d bytes' % (got, total))


async def parallel(n):
    async def opener():
        return await asyncio.wait_for(asyncio.open_connection(host, port), 30)

    async def talk(i, rw):
        r, w = rw
        data = bytes([65 + i % 26]) * 4096
        w.write(data)
        await w.drain()
        return await asyncio.wait_for(r.readexactly(len(data)), 30) == data

    conns = await asyncio.gather(*(opener() for _ in range(n)), return_exceptions=True)
    live = [(i, c) for i, c in enumerate(conns) if not isinstance(c, BaseException)]
    res = await asyncio.gather(*(talk(i, c) for i, c in live), return_exceptions=True)
    for _, (_, w) in live:
        w.close()
    good = sum(1 for x in res if x is True)
    errs = sorted(set(repr(x) for x in list(conns) + list(res) if isinstance(x, BaseException)))
    print('egress-parallel %s %d/%d open %d %s' % ('ok' if good == n else 'fail', good, n,
                                                   len(live), errs[:3]))
    if good != n:
        raise SystemExit(1)


def sink(n):
    cl = []
    for _ in range(n):
        c = socket.create_connection((host, port), timeout=30)
        c.setblocking(False)
        cl.append(c)
    chunk, total, idle = b'x' * 65536, 0, 0
    while idle < 4:
        moved = 0
        for c in cl:
            while True:
                try:
                    moved += c.send(chunk)
                except OSError:
                    break
        total += moved
        idle = idle + 1 if not moved else 0
        time.sleep(0.1)
    print('egress-sink conns %d bytes %d' % (len(cl), total), flush=True)
    time.sleep(2)


if os.environ.get('EGRESS_SINK'):
    sink(int(os.environ['EGRESS_SINK']))
elif os.environ.get('EGRESS_PARALLEL'):
    asyncio.run(parallel(int(os.environ['EGRESS_PARALLEL'])))
else:
    download(int(os.environ['EGRESS_BYTES']))
