"""What Python programs do that Debian's CPython test suite does not cover
here (it ships no test_sqlite3): sqlite3 in WAL mode from threads, xattrs on
the run's own files, reserving space, service names (README.md).
Run by pyunit.py (python3 pyunit.py wl_python)."""
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import unittest


class SQLite(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(dir=os.environ.get("HOME"))
        self.path = os.path.join(self.dir, "db.sqlite3")

    def test_wal_threads(self):
        con = sqlite3.connect(self.path)
        self.assertEqual(con.execute("pragma journal_mode=wal").fetchone()[0], "wal")
        con.execute("create table t (n integer)")
        con.commit()

        def writer(k):
            c = sqlite3.connect(self.path, timeout=30)
            for i in range(50):
                c.execute("insert into t values (?)", (k * 100 + i,))
                c.commit()
            c.close()
        ts = [threading.Thread(target=writer, args=(k,)) for k in range(4)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        self.assertEqual(con.execute("select count(*) from t").fetchone()[0], 200)
        con.close()

    def test_memory_and_backup(self):
        con = sqlite3.connect(":memory:")
        con.execute("create table t (s text)")
        con.executemany("insert into t values (?)", [("x" * 100,)] * 1000)
        con.commit()
        dst = sqlite3.connect(self.path)
        con.backup(dst)
        self.assertEqual(dst.execute("select count(*) from t").fetchone()[0], 1000)


class Files(unittest.TestCase):
    def setUp(self):
        fd, self.path = tempfile.mkstemp(dir=os.environ.get("HOME"))
        os.close(fd)

    def tearDown(self):
        os.unlink(self.path)

    def test_xattr(self):
        os.setxattr(self.path, "user.wl", b"v")
        self.assertEqual(os.getxattr(self.path, "user.wl"), b"v")
        self.assertIn("user.wl", os.listxattr(self.path))
        os.removexattr(self.path, "user.wl")

    def test_posix_fallocate(self):
        with open(self.path, "wb") as f:
            os.posix_fallocate(f.fileno(), 0, 8 << 20)
            self.assertEqual(os.fstat(f.fileno()).st_size, 8 << 20)

    def test_fallocate_command(self):
        subprocess.run(["fallocate", "-l", "8M", self.path], check=True)
        self.assertEqual(os.stat(self.path).st_size, 8 << 20)

    def test_os_sync(self):
        os.sync()


class Processes(unittest.TestCase):
    def test_waitid(self):
        p = subprocess.Popen([sys.executable, "-c", "raise SystemExit(4)"])
        r = os.waitid(os.P_PID, p.pid, os.WEXITED)
        self.assertEqual((r.si_pid, r.si_status), (p.pid, 4))
        p.returncode = 4

    def test_nice(self):
        r = subprocess.run(["nice", "-n", "5", "sh", "-c", "cat /proc/self/stat"],
                           capture_output=True, text=True, check=True)
        self.assertEqual(int(r.stdout.rsplit(")", 1)[1].split()[16]), os.getpriority(os.PRIO_PROCESS, 0) + 5)

    def test_pause(self):
        signal.signal(signal.SIGALRM, lambda *a: None)
        t0 = time.monotonic()
        signal.setitimer(signal.ITIMER_REAL, 0.05)
        signal.pause()
        self.assertGreater(time.monotonic() - t0, 0.02)

    def test_sigwait(self):
        # a handler, so that the signal left pending when a wait is refused
        # does not end the whole run
        signal.signal(signal.SIGUSR1, lambda *a: None)
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})
        try:
            os.kill(os.getpid(), signal.SIGUSR1)
            self.assertIn(signal.SIGUSR1, signal.sigpending())
            self.assertEqual(signal.sigwait({signal.SIGUSR1}), signal.SIGUSR1)
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGUSR1})


class Names(unittest.TestCase):
    def test_getservbyname(self):
        self.assertEqual(socket.getservbyname("http", "tcp"), 80)

    def test_getaddrinfo_service(self):
        ai = socket.getaddrinfo("127.0.0.1", "http", type=socket.SOCK_STREAM)
        self.assertEqual(ai[0][4][1], 80)

    def test_getprotobyname(self):
        self.assertEqual(socket.getprotobyname("tcp"), 6)


if __name__ == "__main__":
    unittest.main()
