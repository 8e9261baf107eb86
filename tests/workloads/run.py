#!/usr/bin/python3
"""Real workloads bare and inside moat, compared test by test (TAP).

    tests/workloads/run.py MOAT_BIN [fast|all]        (make check: fast;
                                                        make seccomp-evidence: all)
    tests/workloads/run.py --list fast|all            the workloads, one a line:
                                                        name, timeout, memory, argv
    tests/workloads/run.py --prepare DIR              copy the workloads to DIR

Each workload (README.md) prints one line per test, "@@wl ok|fail|skip NAME[:
why]". It runs three times, at once: bare as uid 65534 (setpriv, the rlimits
moat gives, a tmpfs HOME and a noexec tmpfs TMPDIR in a mount namespace of its
own, the environment moat gives), then inside `moat run --seccomp-log` with the
default policy as root and rootless (moat itself as uid 65534). A test that
passes bare and fails, is skipped or does not run inside is "not ok", with the
calls the policy refused in that run; a test that fails or is skipped bare is
reported skipped with why, never passed.

Environment: MOAT_WORKLOAD_ONLY (a regular expression over workload names),
MOAT_WORKLOAD_MODES ("root rootless", the default, or one of them),
MOAT_WORKLOAD_POLICY (a policy file passed as --policy inside: for developing
a policy only; make check never sets it), MOAT_WORKLOAD_KEEP (a directory that
keeps every run's output).
"""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
NOBODY = 65534
PY = "/usr/bin/python3"

# CPython's regression suites (Debian: libpython3.11-testsuite); fast: the
# parts of them make check runs. test_eintr runs test._test_eintr in a child
# process: it is run here directly, so its tests compare one by one.
PY_FAST = [
    "test_posix",
    "test_signal:*.PendingSignalsTests.*,*.ItimerTest.test_itimer_real,*.ItimerTest.test_itimer_prof,"
    "*.ItimerTest.test_setitimer_tiny,*.PosixTests.*,*.WakeupSignalTests.*,*.SiginterruptTest.test_siginterrupt_on",
    "_test_eintr:*.OSEINTRTest.*,*.TimeEINTRTest.*,*.SignalEINTRTest.*,*.FNTLEINTRTest.*,*.FSEINTRTest.*",
    "test_fcntl",
    "test_resource",
    "wl_python",
]
PY_ALL = [
    "test_signal", "test_posix", "_test_eintr", "test_fcntl", "test_socket", "test_select",
    "test_time", "test_resource", "test_pty", "wl_python", "test_zipfile", "test_tarfile",
    "test_logging", "test_concurrent_futures", "test_asyncio.test_subprocess",
    "test_asyncio.test_events", "test_asyncio.test_streams", "test_multiprocessing_forkserver",
    "test_os", "test_subprocess",
]


# Tests that cannot pass inside whatever the policy, each with why; one that
# fails inside is reported skipped with this reason (never passed), one that
# passes inside passes. Kept short, and never for a call the policy refuses.
BY_DESIGN = {
    # the user namespace maps the one uid and gid 65534: changing to another
    # user's ids is refused with EINVAL (unmapped), where bare it is EPERM, and
    # these tests assert the errno
    "test.test_os.ChownFileTests.test_chown_without_permission":
        "chown to another uid: EINVAL inside (not mapped in the user namespace), EPERM bare",
    "test.test_subprocess.POSIXProcessTestCase.test_user":
        "setreuid to another user: EINVAL inside (not mapped in the user namespace), EPERM bare",
    "test.test_subprocess.POSIXProcessTestCase.test_group":
        "setregid to another group: EINVAL inside (not mapped in the user namespace), EPERM bare",
}


def workloads(which):
    """[(name, timeout s, memory, argv)] of a set"""
    node = ["node", "--test", "--test-reporter=./node/reporter.mjs", "node/wl.test.mjs"]
    common = [
        ("make", 300, "1G", ["sh", "make.sh"]),
        ("cmake", 300, "1G", ["sh", "cmake.sh"]),
        ("perl", 120, "512M", ["perl", "perl.pl"]),
        ("node", 120, "1G", node),
    ]
    if which == "fast":
        return common + [("python", 300, "2G", [PY, "pyunit.py", "--timeout", "240"] + PY_FAST)]
    out = common + [
        ("git", 120, "1G", ["sh", "git.sh"]),
        ("tar-xz", 120, "1G", ["sh", "tar.sh"]),
        ("go", 600, "2G", ["sh", "go.sh"]),
    ]
    for m in PY_ALL:
        out.append(("python-" + m.split(":")[0], 900, "2G",
                    [PY, "pyunit.py", "--timeout", "840", m]))
    return out


def prepare(dst):
    os.makedirs(dst, exist_ok=True)
    for name in os.listdir(HERE):
        if name in ("__pycache__",):
            continue
        src = os.path.join(HERE, name)
        if os.path.isdir(src):
            shutil.copytree(src, os.path.join(dst, name), dirs_exist_ok=True,
                            ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(src, dst)
    for root, dirs, files in os.walk(dst):
        os.chmod(root, 0o755)
        for f in files:
            p = os.path.join(root, f)
            os.chmod(p, 0o755 if os.access(p, os.X_OK) else 0o644)


LINE = re.compile(r"^@@wl (ok|fail|skip) (\S+?)(?:: (.*))?$")


def parse(text):
    """{test: (status, why)}; a test reported twice keeps its worst verdict"""
    res = {}
    rank = {"ok": 0, "skip": 1, "fail": 2}
    for line in text.splitlines():
        m = LINE.match(line.rstrip())
        if not m:
            continue
        status, name, why = m.group(1), m.group(2), m.group(3) or ""
        if name not in res or rank[status] > rank[res[name][0]]:
            res[name] = (status, why)
    return res


class Run:
    """one run of a workload: its results, exit, refused calls, stderr"""

    def __init__(self):
        self.results = {}
        self.exit = None
        self.denied = []
        self.note = ""
        self.stderr = ""
        self.secs = 0.0


def run_cmd(argv, cwd, timeout, env=None):
    t0 = time.monotonic()
    p = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate()
        return None, out, err, time.monotonic() - t0
    return p.returncode, out, err, time.monotonic() - t0


class Harness:
    def __init__(self, moat, which):
        self.moat = os.path.realpath(moat)
        self.which = which
        self.root = os.geteuid() == 0
        self.scratch = tempfile.mkdtemp(prefix="moat-workloads-", dir="/var/tmp")
        os.chmod(self.scratch, 0o755)
        self.work = os.path.join(self.scratch, "work")
        prepare(self.work)
        self.policy = os.environ.get("MOAT_WORKLOAD_POLICY") or None
        self.keep = os.environ.get("MOAT_WORKLOAD_KEEP") or None
        modes = (os.environ.get("MOAT_WORKLOAD_MODES") or "root rootless").split()
        self.modes = [m for m in modes if m in ("root", "rootless")]
        if self.root:
            bindir = os.path.join(self.scratch, "bin")
            os.mkdir(bindir)
            os.chmod(bindir, 0o755)
            self.moat_rl = os.path.join(bindir, "moat")
            shutil.copy(self.moat, self.moat_rl)
            os.chmod(self.moat_rl, 0o755)
            self.rl_home = os.path.join(self.scratch, "rl-home")
            os.mkdir(self.rl_home, 0o700)
            os.chown(self.rl_home, NOBODY, NOBODY)
        else:
            self.moat_rl = self.moat
            self.rl_home = os.environ.get("HOME", "/")
        self.n = 0
        self.failed = 0
        self.rlimits = self.moat_rlimits()

    def drop(self):
        return ["setpriv", "--reuid=%d" % NOBODY, "--regid=%d" % NOBODY, "--clear-groups"] \
            if self.root else []

    def moat_rlimits(self):
        """the rlimits a sandboxed program gets, for the bare runs"""
        rc, out, err, _ = run_cmd([self.moat, "run", "--", "prlimit", "--raw", "--noheadings",
                                   "-o", "RESOURCE,SOFT,HARD"], "/", 60)
        lims = []
        if rc != 0:
            sys.stdout.write("# could not read moat's rlimits (%s): the bare runs keep the host's\n"
                             % err.decode(errors="replace").strip()[-200:])
            return lims
        for line in out.decode().splitlines():
            f = line.split()
            if len(f) != 3:
                continue
            if not self.root and f[0] != "NOFILE":
                # a caller without root cannot raise a hard limit, and a bare
                # run that fails to start would skip everything: NOFILE alone
                # (moat's is lower than any host's) is copied
                continue
            if f[0] in ("CORE", "FSIZE", "NOFILE", "STACK", "MEMLOCK", "NPROC",
                        "SIGPENDING", "MSGQUEUE", "NICE", "RTPRIO", "AS", "DATA"):
                v = [x if x != "-1" else "unlimited" for x in f[1:]]
                lims.append("--%s=%s:%s" % (f[0].lower(), v[0], v[1]))
        return lims

    def bare(self, name, timeout, argv):
        r = Run()
        env = ["env", "-i", "PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C.UTF-8"]
        if self.root:
            # HOME and TMPDIR as moat gives them: tmpfs, /tmp noexec
            base = tempfile.mkdtemp(prefix="bare-%s-" % name, dir=self.scratch)
            os.chmod(base, 0o755)
            home, tmp = os.path.join(base, "home"), os.path.join(base, "tmp")
            os.mkdir(home)
            os.mkdir(tmp)
            mount = ('mount -t tmpfs -o size=64m,mode=0755,nosuid,nodev tmpfs "$0" && '
                     'mount -t tmpfs -o size=64m,mode=1777,nosuid,nodev,noexec tmpfs "$1" && '
                     'chown %d:%d "$0" "$1" && shift && exec "$@"' % (NOBODY, NOBODY))
            cmd = ["unshare", "--mount", "--propagation", "private", "sh", "-c", mount, home, tmp,
                   "prlimit"] + self.rlimits + self.drop() + env + \
                ["HOME=" + home, "TMPDIR=" + tmp] + argv
        else:
            base = tempfile.mkdtemp(prefix="bare-%s-" % name, dir=self.scratch)
            home, tmp = os.path.join(base, "home"), os.path.join(base, "tmp")
            os.mkdir(home)
            os.mkdir(tmp)
            cmd = ["prlimit"] + self.rlimits + env + ["HOME=" + home, "TMPDIR=" + tmp] + argv
        rc, out, err, r.secs = run_cmd(cmd, self.work, timeout)
        shutil.rmtree(base, ignore_errors=True)
        r.exit = rc
        if rc is None:
            r.note = "timed out after %d s" % timeout
        r.results = parse(out.decode(errors="replace"))
        r.stderr = err.decode(errors="replace")
        self.save(name, "bare", out, err)
        return r

    def inside(self, name, mode, timeout, memory, argv):
        r = Run()
        rootless = mode.startswith("rootless")
        moat = self.moat_rl if rootless else self.moat
        cmd = [moat, "run", "--json", "--seccomp-log", "--timeout", "%ds" % timeout,
               "--memory", memory, "--max-output", str(16 << 20), "--workdir", self.work]
        if self.policy:
            cmd += ["--policy", self.policy]
        cmd += ["--"] + argv
        if rootless and self.root:
            cmd = self.drop() + ["env", "-i", "PATH=/usr/local/bin:/usr/bin:/bin",
                                 "HOME=" + self.rl_home] + cmd
        rc, out, err, r.secs = run_cmd(cmd, "/", timeout + 60)
        self.save(name, mode, out, err)
        try:
            res = json.loads(out)
        except ValueError:
            r.note = "moat exit %s, no result: %s" % (
                rc, " ".join(err.decode(errors="replace").split())[-300:])
            return r
        if "error" in res:
            r.note = "moat refused the run: %s" % res["error"].get("message", "")
            return r
        r.exit = res.get("exitCode")
        if res.get("timedOut"):
            r.note = "timed out after %d s" % timeout
        elif res.get("killedBy") or res.get("signal"):
            r.note = "killed (%s, signal %s)" % (res.get("killedBy"), res.get("signal"))
        r.denied = (res.get("seccomp") or {}).get("denied") or []
        r.results = parse(res.get("stdout") or "")
        r.stderr = res.get("stderr") or ""
        return r

    def save(self, name, mode, out, err):
        if not self.keep:
            return
        os.makedirs(self.keep, exist_ok=True)
        with open(os.path.join(self.keep, "%s.%s.out" % (name, mode)), "wb") as f:
            f.write(out)
        with open(os.path.join(self.keep, "%s.%s.err" % (name, mode)), "wb") as f:
            f.write(err)

    def tap(self, ok, text, skip=None):
        self.n += 1
        text = " ".join(text.split())
        if skip is not None:
            print("ok %d - %s # SKIP %s" % (self.n, text, " ".join(skip.split())[:400]))
        elif ok:
            print("ok %d - %s" % (self.n, text))
        else:
            self.failed += 1
            print("not ok %d - %s" % (self.n, text))
        sys.stdout.flush()

    @staticmethod
    def refused(run):
        if not run.denied:
            return "no call refused"
        return "refused: " + ", ".join(
            "%s (%s) x%d" % (d.get("syscall"), d.get("errno"), d.get("count", 0))
            for d in run.denied)

    @staticmethod
    def enclosing(results, test):
        """a class- or module-level verdict inside that covers a test that did not run"""
        best = None
        for name, (status, why) in results.items():
            stem = re.sub(r"\.(setUpClass|setUpModule|tearDownClass|tearDownModule)$", "", name)
            if status != "ok" and test.startswith(stem + ".") and (best is None or len(stem) > len(best[0])):
                best = (stem, "%s %s: %s" % (name, status, why))
        return best[1] if best else None

    def compare(self, name, mode, bare, run):
        label = "%s (%s)" % (name, mode)
        if run.note:
            sys.stdout.write("# %s: %s\n" % (label, run.note))
        for test in sorted(bare.results):
            bstatus, bwhy = bare.results[test]
            if bstatus != "ok":
                self.tap(True, "%s: %s" % (label, test),
                         skip="%s bare: %s" % ("fails" if bstatus == "fail" else "skipped", bwhy))
                continue
            got = run.results.get(test)
            if got and got[0] == "ok":
                self.tap(True, "%s: %s" % (label, test))
                continue
            if test in BY_DESIGN:
                self.tap(True, "%s: %s" % (label, test), skip="passes bare, fails inside by design: %s (%s)"
                         % (BY_DESIGN[test], got[1] if got else "did not run"))
                continue
            if got:
                what = "%s inside: %s" % ("fails" if got[0] == "fail" else "skipped", got[1])
            else:
                cover = self.enclosing(run.results, test)
                what = "did not run inside" + (" (%s)" % cover if cover else "") + \
                    (" (%s)" % run.note if run.note else "")
            self.tap(False, "%s: %s passes bare, %s; %s" % (label, test, what, self.refused(run)))
        # what failed inside and has no test of its own bare (a class set-up, an import)
        for test, (status, why) in sorted(run.results.items()):
            if status == "fail" and test not in bare.results:
                self.tap(False, "%s: %s fails inside (not a test bare): %s; %s"
                         % (label, test, why, self.refused(run)))
        if run.results == {} or (run.note and self.failed):
            tail = run.stderr.strip().splitlines()[-6:]
            for line in tail:
                sys.stdout.write("#   %s\n" % line[:300])

    def one(self, name, timeout, memory, argv):
        runs = {}
        threads = [threading.Thread(target=lambda: runs.__setitem__("bare", self.bare(name, timeout, argv)))]
        for mode in self.modes:
            if mode == "root" and not self.root:
                continue
            threads.append(threading.Thread(
                target=lambda m=mode: runs.__setitem__(m, self.inside(name, m, timeout, memory, argv))))
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        bare = runs["bare"]
        sys.stdout.write("# %s: bare %.0f s%s\n" % (name, bare.secs, "".join(
            ", %s %.0f s" % (m, runs[m].secs) for m in self.modes if m in runs)))
        if not bare.results:
            why = bare.note or "exit %s" % bare.exit
            tail = " | ".join(bare.stderr.strip().splitlines()[-3:])
            for mode in self.modes:
                self.tap(True, "%s (%s)" % (name, mode), skip="no result bare (%s): %s" % (why, tail[-300:]))
            return
        for mode in self.modes:
            if mode == "root" and not self.root:
                self.tap(True, "%s (root)" % name, skip="root mode needs root")
                continue
            self.retry(name, mode, timeout, memory, argv, bare, runs[mode])
            self.compare(name, mode, bare, runs[mode])

    def retry(self, name, mode, timeout, memory, argv, bare, run):
        """Tests that passed bare and not inside while the policy refused
        nothing (no EPERM: clone3's ENOSYS is glibc's way to fall back to
        clone) run once more inside, alone: on a loaded machine a timing test
        can lose once. One that passes then counts as passed, and a comment
        says so; with any call refused there is no second chance."""
        lost = sorted(t for t, (st, _) in bare.results.items()
                      if st == "ok" and run.results.get(t, ("",))[0] != "ok")
        if not lost or any(d.get("errno") != "ENOSYS" for d in run.denied):
            return
        again = self.inside(name, mode + "-retry", timeout, memory, self.retry_argv(argv, lost))
        passed = [t for t in lost if again.results.get(t, ("",))[0] == "ok"]
        for t in passed:
            sys.stdout.write("# %s (%s): %s failed inside (%s) with no call refused; passed on a retry\n"
                             % (name, mode, t, " ".join((run.results.get(t) or ("", "did not run"))[1].split())[:200]))
            run.results[t] = ("ok", "")
        run.denied = run.denied + [d for d in again.denied if d not in run.denied]

    @staticmethod
    def retry_argv(argv, tests):
        """a pyunit argv narrowed to the given test ids; any other, as it was"""
        if "pyunit.py" not in argv:
            return argv
        i = argv.index("pyunit.py") + 1
        head, rest = argv[:i], argv[i:]
        if rest[:1] == ["--timeout"]:
            head, rest = head + rest[:2], rest[2:]
        specs = []
        for spec in rest:
            mod = spec.split(":")[0]
            modname = mod if mod.startswith("wl_") else "test." + mod
            ids = [t for t in tests if t.startswith(modname + ".")]
            if ids:
                specs.append(mod + ":" + ",".join(ids))
        return head + specs if specs else argv

    def main(self, only):
        t0 = time.monotonic()
        try:
            for name, timeout, memory, argv in workloads(self.which):
                if only and not re.search(only, name):
                    continue
                self.one(name, timeout, memory, argv)
        finally:
            shutil.rmtree(self.scratch, ignore_errors=True)
        print("1..%d" % self.n)
        print("# workloads (%s): %d tests, %d failed, %.0f s" % (
            self.which, self.n, self.failed, time.monotonic() - t0))
        return 1 if self.failed else 0


def main(argv):
    if argv[:1] == ["--list"]:
        for name, timeout, memory, args in workloads(argv[1] if len(argv) > 1 else "all"):
            print("\t".join([name, str(timeout), memory] + args))
        return 0
    if argv[:1] == ["--prepare"]:
        prepare(argv[1])
        return 0
    if not argv:
        sys.stderr.write(__doc__)
        return 2
    which = argv[1] if len(argv) > 1 else "fast"
    if which not in ("fast", "all"):
        sys.stderr.write("run.py: the set is fast or all\n")
        return 2
    return Harness(argv[0], which).main(os.environ.get("MOAT_WORKLOAD_ONLY"))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
