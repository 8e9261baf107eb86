"""runtime/python/moat_session.py, the Python session driver, run as moat runs
it (docs/SESSIONS.md, "The driver protocol"): a socketpair as fd 3, pipes as
fd 1 and 2, /dev/null as fd 0, /usr/bin/python3. No sandbox: the step's files
go under a temporary directory (MOAT_SESSION_ROOT, for these tests only).

Run: /usr/bin/python3 -m unittest discover -s tests/runtime -p 'test_*.py'
"""
import base64
import fcntl
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DRIVER = os.path.join(ROOT, "runtime", "python", "moat_session.py")
PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
TIMEOUT = 60


def b64(b):
    return base64.b64encode(b if isinstance(b, bytes) else b.encode()).decode()


class Driver:
    """One driver process and the host's ends of its channels."""

    def __init__(self, env=None):
        self.dir = tempfile.mkdtemp(prefix="moat-session-test-")
        self.host, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        e = dict(os.environ)
        e.pop("MPLBACKEND", None)
        e.pop("MPLCONFIGDIR", None)
        e.pop("PYTHONUNBUFFERED", None)  # the sandbox's env has none: buffered as there
        e["MOAT_SESSION_ROOT"] = self.dir
        e["HOME"] = self.dir
        e.update(env or {})
        cfd = child.fileno()
        self.proc = subprocess.Popen(
            [PYTHON, DRIVER], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, close_fds=False, env=e, cwd=self.dir,
            preexec_fn=lambda: os.dup2(cfd, 3))
        child.close()
        for f in (self.proc.stdout, self.proc.stderr):
            fl = fcntl.fcntl(f.fileno(), fcntl.F_GETFL)
            fcntl.fcntl(f.fileno(), fcntl.F_SETFL, fl | os.O_NONBLOCK)
        self.host.settimeout(TIMEOUT)
        self.buf = b""
        self.out = b""
        self.err = b""
        self.seq = 0

    def close(self):
        self.host.close()
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self.proc.stdout.close()
        self.proc.stderr.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def send_raw(self, data):
        self.host.sendall(data)

    def send(self, obj):
        body = json.dumps(obj).encode()
        self.send_raw(b"MOATSESS1 %d\n" % len(body) + body)

    def frame(self):
        """The next frame from the driver, or None at EOF."""
        while b"\n" not in self.buf:
            b = self.host.recv(65536)
            if not b:
                return None
            self.buf += b
        head, _, rest = self.buf.partition(b"\n")
        assert head.startswith(b"MOATSESS1 "), head
        n = int(head[10:])
        while len(rest) < n:
            b = self.host.recv(65536)
            assert b, "EOF inside a frame"
            rest += b
        self.buf = rest[n:]
        return json.loads(rest[:n].decode("utf-8"))

    def drain(self):
        """What the driver wrote to fd 1 and fd 2 so far (without waiting)."""
        for f, attr in ((self.proc.stdout, "out"), (self.proc.stderr, "err")):
            while True:
                try:
                    b = os.read(f.fileno(), 65536)
                except BlockingIOError:
                    break
                if not b:
                    break
                setattr(self, attr, getattr(self, attr) + b)

    def run(self, code, stdin=b"", files=()):
        """One step: (done frame, its stdout, its stderr)."""
        self.seq += 1
        self.out = self.err = b""
        self.send({"type": "run", "seq": self.seq, "code": code, "stdin": b64(stdin),
                   "files": [[p, b64(c)] for p, c in files]})
        done = self.frame()
        self.drain()
        if done is not None:
            assert done["type"] == "done" and done["seq"] == self.seq, done
        return done, self.out.decode(), self.err.decode()

    def wait(self):
        rc = self.proc.wait(TIMEOUT)
        self.drain()
        return rc


def err_of(done):
    """A done frame's error as before issue 46: its type and message."""
    e = done["error"]
    return e and {"type": e["type"], "message": e["message"]}


class DriverTest(unittest.TestCase):
    def setUp(self):
        self.d = Driver()
        self.addCleanup(self.d.close)
        ready = self.d.frame()
        self.assertEqual(ready["type"], "ready")
        self.ready = ready

    def ok(self, code, **kw):
        done, out, err = self.d.run(code, **kw)
        self.assertEqual(done["exitCode"], 0, err)
        self.assertIsNone(done["error"], err)
        return done, out, err

    def test_ready_frame(self):
        self.assertEqual(self.ready["language"], "python")
        self.assertEqual(self.ready["version"], "%d.%d.%d" % sys.version_info[:3]
                         if PYTHON == sys.executable else self.ready["version"])
        self.assertRegex(self.ready["version"], r"^3\.\d+\.\d+$")

    def test_state_kept_across_50_steps(self):
        self.ok("import math\nn = 0\ndef bump(k):\n    global n\n    n += k\n")
        for i in range(1, 51):
            done, out, _ = self.ok("bump(%d)\nprint(n)" % i)
            self.assertEqual(out, "%d\n" % (i * (i + 1) // 2))
        done, _, _ = self.ok("n, math.floor(2.5)")
        self.assertEqual(done["value"], "(1275, 2)")

    def test_value_is_repr_of_last_expression(self):
        done, out, _ = self.ok("x = 41\nx + 1")
        self.assertEqual(done["value"], "42")
        self.assertFalse(done["valueTruncated"])
        self.assertEqual(out, "")
        done, _, _ = self.ok("'a\\nb'")
        self.assertEqual(done["value"], "'a\\nb'")
        for code in ("None", "print('hi')", "y = 1", "", "# a comment", "for i in range(2):\n    i"):
            with self.subTest(code=code):
                done, _, _ = self.ok(code)
                self.assertIsNone(done["value"])
        self.assertEqual(self.d.run("print('p')")[1], "p\n")

    def test_value_cut_at_64_kib(self):
        done, _, _ = self.ok("'é' * 100000")
        self.assertTrue(done["valueTruncated"])
        v = done["value"].encode()
        self.assertLessEqual(len(v), 65536)
        self.assertGreater(len(v), 65536 - 4)
        self.assertTrue(done["value"].startswith("'ééé"))
        done, _, _ = self.ok("'x' * 65534")  # with its quotes: 65536 bytes, not cut
        self.assertFalse(done["valueTruncated"])
        self.assertEqual(len(done["value"]), 65536)

    def test_exception_is_an_error_and_the_session_goes_on(self):
        self.ok("x = 1")
        done, out, err = self.d.run("def f():\n    return 1 / 0\nprint('before')\nf()")
        self.assertEqual(done["exitCode"], 1)
        self.assertEqual(err_of(done), {"type": "ZeroDivisionError", "message": "division by zero"})
        # Jupyter's name, value and traceback besides
        e = done["error"]
        self.assertEqual((e["name"], e["value"]), ("ZeroDivisionError", "division by zero"))
        self.assertEqual(e["traceback"][0], "Traceback (most recent call last):")
        self.assertIn('  File "<cell 2>", line 2, in f', e["traceback"])
        self.assertEqual(e["traceback"][-1], "ZeroDivisionError: division by zero")
        self.assertFalse(any("\n" in l or "moat_session" in l for l in e["traceback"]))
        self.assertIsNone(done["value"])
        self.assertEqual(out, "before\n")
        self.assertIn("Traceback (most recent call last):", err)
        self.assertIn('File "<cell 2>", line 4, in <module>', err)
        self.assertIn("    return 1 / 0", err)  # the cell's source line is shown
        self.assertIn("ZeroDivisionError: division by zero", err)
        self.assertNotIn("moat_session", err)
        done, _, _ = self.ok("x + 1")
        self.assertEqual(done["value"], "2")
        # a syntax error, and an error in the last expression
        done, _, err = self.d.run("x = (")
        self.assertEqual(done["error"]["type"], "SyntaxError")
        self.assertIn('File "<cell 4>", line 1', err)
        self.assertNotIn("moat_session", err)
        done, _, err = self.d.run("{}['k']")
        self.assertEqual(err_of(done), {"type": "KeyError", "message": "'k'"})
        self.assertNotIn("moat_session", err)
        self.ok("x")
        # an error's message is cut at 8 KiB in `done` (stderr has it whole), a lone surrogate escaped
        done, _, err = self.d.run("raise ValueError('m' * 30000 + '\\ud800')")
        self.assertEqual(done["error"]["message"], "m" * 8192)
        self.assertIn("m" * 30000, err)
        done, _, err = self.d.run("raise ValueError('\\ud800')")
        self.assertEqual(done["error"]["message"], "\\ud800")

    def test_top_level_await(self):
        self.ok("import asyncio\nasync def f(x):\n    await asyncio.sleep(0.01)\n    return x * 2\n"
                "y = await f(2)")
        done, _, _ = self.ok("await f(y)")
        self.assertEqual(done["value"], "8")
        done, _, _ = self.ok("asyncio.run(f(5))")  # a step without one may run its own loop
        self.assertEqual(done["value"], "10")
        done, _, err = self.d.run("async def g():\n    raise ValueError('in g')\nawait g()")
        self.assertEqual(err_of(done), {"type": "ValueError", "message": "in g"})
        self.assertTrue(err.startswith('Traceback (most recent call last):\n  File "<cell 4>", line 3'), err)
        self.assertNotIn("asyncio", err)
        self.assertNotIn("moat_session", err)
        done, _, _ = self.ok("'asyncio' in globals(), y")
        self.assertEqual(done["value"], "(True, 4)")

    def test_system_exit(self):
        for code, rc, err in (("import sys; sys.exit()", 0, ""), ("raise SystemExit(3)", 3, ""),
                              ("import sys; sys.exit('bye')", 1, "bye\n"),
                              ("exit(256 + 7)", 7, "")):
            with self.subTest(code=code):
                done, _, e = self.d.run(code)
                self.assertEqual(done["exitCode"], rc)
                self.assertIsNone(done["error"])
                self.assertEqual(e, err)
        self.ok("print('still here')")

    def test_the_step_sees_main_and_not_the_driver(self):
        done, _, _ = self.ok("sorted(k for k in globals() if k != '__builtins__')")
        self.assertEqual(done["value"], "['__doc__', '__loader__', '__name__', '__package__', '__spec__']")
        done, _, _ = self.ok("import sys\n(__name__, sys.argv, sys.path[0],"
                             " sys.modules['__main__'].__dict__ is globals())")
        self.assertEqual(done["value"], "('__main__', [''], %r, True)" % self.d.dir)
        for name in ("main", "step", "run_code", "ROOT", "json", "ast", "os", "_Channel"):
            with self.subTest(name=name):
                self.assertEqual(self.d.run(name)[0]["error"]["type"], "NameError")
        # a class pickles by its __main__ name
        done, _, _ = self.ok("import pickle\nclass P: pass\ntype(pickle.loads(pickle.dumps(P()))).__name__")
        self.assertEqual(done["value"], "'P'")

    def test_stdin_per_step(self):
        done, _, _ = self.ok("import sys\nsys.stdin.read()", stdin=b"one\ntwo\n")
        self.assertEqual(done["value"], "'one\\ntwo\\n'")
        done, _, _ = self.ok("sys.stdin.read()")
        self.assertEqual(done["value"], "''")
        done, _, _ = self.ok("import os\nos.read(0, 100)", stdin=b"\x00\xff")
        self.assertEqual(done["value"], "b'\\x00\\xff'")
        done, _, _ = self.ok("input()", stdin=b"third\n")
        self.assertEqual(done["value"], "'third'")
        # a child process reads it too
        done, out, _ = self.ok("import subprocess\nsubprocess.run(['cat'])\nNone", stdin=b"to cat")
        self.assertEqual(out, "to cat")

    def test_files_written_and_bad_paths_refused(self):
        done, _, _ = self.ok("open('a/b/c.txt').read() + open('top').read()",
                             files=[("a/b/c.txt", b"deep "), ("top", b"top")])
        self.assertEqual(done["value"], "'deep top'")
        st = os.stat(os.path.join(self.d.dir, "a", "b", "c.txt"))
        self.assertEqual(st.st_mode & 0o777, 0o644)
        self.assertEqual(os.stat(os.path.join(self.d.dir, "a")).st_mode & 0o777, 0o755)
        outside = os.path.join(os.path.dirname(self.d.dir), "moat-session-escape")
        for bad in ("../moat-session-escape", "/tmp/moat-abs", "a/../../x", "", "a/"):
            with self.subTest(path=bad):
                done, _, err = self.d.run("ran = True", files=[("ok.txt", b"no"), (bad, b"x")])
                self.assertEqual(done["exitCode"], 1)
                self.assertEqual(done["error"]["type"], "ValueError")
                self.assertFalse(os.path.exists(os.path.join(self.d.dir, "ok.txt")))
                self.assertFalse(os.path.exists(outside))
                self.assertFalse(os.path.exists("/tmp/moat-abs"))
        self.assertEqual(self.d.run("ran")[0]["error"]["type"], "NameError")  # the code did not run

    def test_output_before_done_is_in_the_pipe(self):
        code = ("import sys, os\nos.write(1, b'raw|')\nsys.stdout.write('o' * 50000)\n"
                "sys.stderr.write('e' * 3000)\nsys.__stdout__.write('no newline')")
        done, out, err = self.ok(code)
        self.assertEqual(out, "raw|" + "o" * 50000 + "no newline")
        self.assertEqual(err, "e" * 3000)

    def test_os_exit_ends_the_process(self):
        self.ok("x = 1")
        self.d.seq += 1
        self.d.send({"type": "run", "seq": self.d.seq, "code": "import os\nprint('last', flush=True)\nos._exit(5)",
                     "stdin": "", "files": []})
        self.assertIsNone(self.d.frame())
        self.assertEqual(self.d.wait(), 5)
        self.assertEqual(self.d.out, b"last\n")

    def test_eof_on_the_channel_ends_it_quietly(self):
        self.d.host.shutdown(socket.SHUT_WR)
        self.assertEqual(self.d.wait(), 0)
        self.assertEqual(self.d.err, b"")

    def test_malformed_frames_exit_2(self):
        bad = [b"MOATSESS2 2\n{}", b"MOATSESS1 x\n", b"MOATSESS1 12345678901\n", b"MOATSESS1 3\n{]}",
               b"MOATSESS1 2\n[]", b"MOATSESS1 15\n{\"type\":\"run\"}",
               b'MOATSESS1 43\n{"type":"run","seq":1,"code":"","stdin":"*"}',
               b"garbage without a newline" * 3, b"MOATSESS1 10\n{}"]
        for i, frame in enumerate(bad):
            with self.subTest(frame=frame):
                d = Driver() if i else self.d
                if i:
                    self.addCleanup(d.close)
                    self.assertEqual(d.frame()["type"], "ready")
                d.send_raw(frame)
                d.host.shutdown(socket.SHUT_WR)
                self.assertIsNone(d.frame())
                self.assertEqual(d.wait(), 2)
                self.assertEqual(d.err.count(b"\n"), 1, d.err)
                self.assertIn(b"moat session driver:", d.err)

    def test_control_fd_not_inherited(self):
        done, out, _ = self.ok("import subprocess\nsubprocess.run(['sh', '-c', 'readlink /proc/$$/fd/3 || echo none'],"
                               " close_fds=False, stderr=subprocess.DEVNULL)\nNone")
        self.assertEqual(out, "none\n")
        done, _, _ = self.ok("import os\nos.get_inheritable(3)")
        self.assertEqual(done["value"], "False")

    def test_matplotlib_figure_is_a_png_and_closed(self):
        try:
            subprocess.run([PYTHON, "-c", "import matplotlib"], check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        except subprocess.CalledProcessError:
            self.skipTest("matplotlib is not importable by %s" % PYTHON)
        done, _, _ = self.ok("import os\n(os.environ['MPLBACKEND'], os.environ['MPLCONFIGDIR'])")
        self.assertEqual(done["value"], "('Agg', '/tmp/.moat-mpl')")
        done, _, err = self.ok("import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\n"
                               "plt.figure()\nplt.bar([1], [2])\nNone")
        self.assertEqual(len(done["display"]), 2, err)
        self.assertEqual(done["displayDropped"], 0)
        for item in done["display"]:
            self.assertEqual(item["type"], "image/png")
            self.assertTrue(base64.b64decode(item["data"]).startswith(b"\x89PNG\r\n\x1a\n"))
        done, _, _ = self.ok("plt.get_fignums()")
        self.assertEqual(done["value"], "[]")
        self.assertEqual(done["display"], [])
        # past 64 figures the rest is dropped
        done, _, _ = self.ok("for i in range(70):\n    plt.figure(figsize=(0.5, 0.5), dpi=20)\n")
        self.assertEqual((len(done["display"]), done["displayDropped"]), (64, 6))
        self.assertEqual(self.d.run("plt.get_fignums()")[0]["value"], "[]")
        # past 8 MiB the rest is dropped
        done, _, _ = self.ok("import numpy as np\nfor i in range(3):\n"
                             "    plt.figure(figsize=(20, 20), dpi=100)\n"
                             "    plt.imshow(np.random.default_rng(i).random((2000, 2000, 3)))\n")
        self.assertEqual(len(done["display"]) + done["displayDropped"], 3)
        self.assertGreater(done["displayDropped"], 0)
        self.assertLessEqual(sum(len(base64.b64decode(x["data"])) for x in done["display"]), 8 << 20)

    def test_sigint_interrupts_a_step_and_is_dropped_between(self):
        self.ok("x = 41\nimport time")
        # between steps: dropped, the next step runs whole
        self.d.proc.send_signal(signal.SIGINT)
        time.sleep(0.3)
        done, _, _ = self.ok("x + 1")
        self.assertEqual(done["value"], "42")
        for code in ("time.sleep(60)", "while True: x = 41",
                     "import socket\na, b = socket.socketpair()\na.recv(1)"):
            with self.subTest(code=code):
                self.d.seq += 1
                self.d.send({"type": "run", "seq": self.d.seq, "code": code,
                             "stdin": "",
                             "files": []})
                time.sleep(1.0)
                self.d.proc.send_signal(signal.SIGINT)
                done = self.d.frame()
                self.assertEqual(done["seq"], self.d.seq)
                self.assertEqual(done["error"]["name"], "KeyboardInterrupt")
                self.assertFalse(any("moat_session" in l for l in done["error"]["traceback"]))
        done, _, _ = self.ok("x + 1")
        self.assertEqual(done["value"], "42")

    def test_results_and_display(self):
        done, _, _ = self.ok(
            "class H:\n"
            "    def _repr_html_(self): return '<b>h</b>'\n"
            "    def _repr_svg_(self): return '<svg/>'\n"
            "    def _repr_jpeg_(self): return b'\\xff\\xd8'\n"
            "    def _repr_latex_(self): return ('$x$', {})\n"
            "    def __repr__(self): return 'H()'\n"
            "class M:\n"
            "    def _repr_mimebundle_(self, include=None, exclude=None):\n"
            "        return {'text/markdown': '# m', 'application/json': {'k': 1}, 'x/other': 'no'}\n"
            "class Bad:\n"
            "    def _repr_html_(self): raise RuntimeError('no')\n"
            "display(H())\ndisplay(M(), Bad())\nH")
        r = done["results"]
        self.assertEqual(len(r), 4, r)
        self.assertEqual(r[0], {"isMain": False, "data": {
            "text/html": "<b>h</b>", "image/svg+xml": "<svg/>", "image/jpeg": "/9g=",
            "text/latex": "$x$", "text/plain": "H()"}})
        self.assertEqual(r[1]["data"]["text/markdown"], "# m")
        self.assertEqual(r[1]["data"]["application/json"], {"k": 1})
        self.assertNotIn("x/other", r[1]["data"])
        self.assertEqual(list(r[2]["data"]), ["text/plain"])  # its _repr_html_ raised
        self.assertTrue(r[3]["isMain"])
        self.assertIn("class", r[3]["data"]["text/plain"])  # a class: its repr, no _repr_*_
        self.assertEqual(done["executionCount"], 1)
        self.assertFalse(done["resultsTruncated"])
        # display is a builtin, not a global of the session's
        done, _, _ = self.ok("'display' in globals(), callable(display)")
        self.assertEqual(done["value"], "(False, True)")
        self.assertEqual(done["executionCount"], 2)
        # bounds: past 64 results, and an entry past 4 MiB
        done, _, _ = self.ok("for i in range(70): display(i)")
        self.assertEqual(len(done["results"]), 64)
        self.assertTrue(done["resultsTruncated"])
        done, _, _ = self.ok("class B:\n    def _repr_html_(self): return 'x' * (5 << 20)\nB()")
        self.assertNotIn("text/html", done["results"][0]["data"])
        self.assertTrue(done["resultsTruncated"])

    def test_shell_escape_and_pip(self):
        done, out, err = self.ok("print('a')\n!echo sh-$((6*7))\nif True:\n    !echo in-block\n"
                                 "s = '''\n!echo not-run\n'''\nprint(s.strip())")
        self.assertEqual(out, "a\nsh-42\nin-block\n!echo not-run\n")
        for code in ("%pip install x", "!pip install x", "%conda install y"):
            with self.subTest(code=code):
                done, _, _ = self.d.run(code)
                self.assertEqual(done["error"]["name"], "RuntimeError")
                self.assertIn("docs/rootfs.md", done["error"]["value"])
        done, _, _ = self.d.run("%timeit 1")
        self.assertEqual(done["error"]["name"], "SyntaxError")

    def test_memory_limit_is_a_memory_error(self):
        d = Driver(env={"MOAT_SESSION_MEMORY_MB": "128"})
        self.addCleanup(d.close)
        self.assertEqual(d.frame()["type"], "ready")
        done, _, _ = d.run("import os\n'MOAT_SESSION_MEMORY_MB' in os.environ")
        self.assertEqual(done["value"], "False")
        done, _, _ = d.run("b = bytearray(300 << 20)")
        self.assertEqual(done["error"]["name"], "MemoryError")
        done, _, _ = d.run("import resource\nresource.getrlimit(resource.RLIMIT_DATA)[0] >> 20")
        self.assertEqual(done["value"], "112")


if __name__ == "__main__":
    unittest.main()
