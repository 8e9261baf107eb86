"""Runs CPython regression test modules and prints one line per test.

    python3 pyunit.py [--timeout S] SPEC...
    SPEC: a module of Lib/test (test_signal, test_asyncio.test_subprocess)
          or of this directory (wl_python),
          optionally with ":" and comma-separated fnmatch patterns over the
          test id (test_posix:*.PosixTester.test_wait*,*.test_sched_*)

Each line: "@@wl ok|fail|skip ID[: why]" on the original standard output
(tests/workloads/run.sh compares them, bare against inside moat). A module
that cannot be imported or raises SkipTest prints one line for the module
itself. Like regrtest without -u, except that the 'subprocess', 'decimal'
and 'walltime' resources are on ('network', 'cpu', 'largefile' stay off).
"""
import faulthandler
import fnmatch
import importlib
import os
import re
import sys
import time
import traceback
import unittest

from test import support
from test.support import os_helper

TIMES = os.environ.get("PYUNIT_TIMES") == "1"
OUT = os.fdopen(os.dup(1), "w", buffering=1, errors="backslashreplace")


MAIN_PID = os.getpid()


def emit(status, name, why=""):
    if os.getpid() != MAIN_PID:
        # a forked child whose exec failed came back into the runner (as
        # test_posix's test_fexecve's does when execveat is refused): it must
        # not go on running the suite beside its parent
        os._exit(70)
    why = " ".join(str(why).split())[:300]
    OUT.write("\n@@wl %s %s%s\n" % (status, name, ": " + why if why else ""))
    OUT.flush()


ERRLINE = re.compile(r"^\s*[\w.]*(Error|Exception|Exit|Interrupt)\b.*")


def last_line(err):
    """the line that says what went wrong: assert_python_ok's message ends in
    the child's traceback and a "---" line, so its last exception line"""
    text = "".join(traceback.format_exception_only(err[0], err[1])).strip()
    lines = [l for l in text.splitlines() if l.strip() and set(l.strip()) != {"-"}]
    if not lines:
        return repr(err[1])
    errs = [l for l in lines[1:] if ERRLINE.match(l)]
    return (lines[0] + " ... " + errs[-1].strip()) if errs else lines[-1]


class Result(unittest.TestResult):
    """Records a verdict per test id; prints it when the test stops."""

    def __init__(self):
        super().__init__()
        self.verdict = {}

    def _id(self, test):
        # errors in setUpClass/setUpModule come as an _ErrorHolder whose id
        # is "setUpClass (test.test_x.Class)": name the class instead
        desc = getattr(test, "description", None)
        if desc is not None and " (" in desc:
            kind, where = desc.split(" (", 1)
            return where.rstrip(")") + "." + kind
        return test.id()

    def startTest(self, test):
        if os.getpid() != MAIN_PID:
            os._exit(70)
        super().startTest(test)
        self.verdict[test.id()] = ("ok", "")
        self.t0 = time.monotonic()

    def stopTest(self, test):
        super().stopTest(test)
        status, why = self.verdict.get(test.id(), ("ok", ""))
        emit(status, test.id(), why)
        if TIMES:
            sys.stderr.write("pyunit: %.2f s %s\n" % (time.monotonic() - self.t0, test.id()))

    def _fail(self, test, err):
        name = self._id(test)
        if name in self.verdict:
            self.verdict[name] = ("fail", last_line(err))
        else:  # a class or module level error: no startTest/stopTest
            emit("fail", name, last_line(err))

    def addError(self, test, err):
        super().addError(test, err)
        self._fail(test, err)

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self._fail(test, err)

    def addSubTest(self, test, subtest, err):
        super().addSubTest(test, subtest, err)
        if err is not None:
            self._fail(test, err)

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        name = self._id(test)
        if name in self.verdict:
            self.verdict[name] = ("skip", reason)
        else:
            emit("skip", name, reason)

    def addUnexpectedSuccess(self, test):
        super().addUnexpectedSuccess(test)
        self.verdict[test.id()] = ("fail", "unexpected success")


def run(spec, timeout):
    name, _, pats = spec.partition(":")
    patterns = [p for p in pats.split(",") if p]
    # wl_*: a module of this directory; else one of CPython's Lib/test
    modname = name if name.startswith("wl_") else "test." + name
    t0 = time.monotonic()
    try:
        suite = unittest.defaultTestLoader.loadTestsFromName(modname)
    except unittest.SkipTest as e:
        emit("skip", modname, e)
        return
    except Exception:
        emit("fail", modname, "import: " + last_line(sys.exc_info()))
        return
    if patterns:
        support._filter_suite(
            suite, lambda t: any(fnmatch.fnmatchcase(t.id(), p) for p in patterns))
    faulthandler.dump_traceback_later(timeout, exit=True)
    result = Result()
    try:
        suite.run(result)
    finally:
        faulthandler.cancel_dump_traceback_later()
    sys.stderr.write("pyunit: %s: %d run, %d failed, %d errors, %d skipped, %.1f s\n" % (
        modname, result.testsRun, len(result.failures), len(result.errors),
        len(result.skipped), time.monotonic() - t0))


def main(argv):
    timeout = 600
    if argv[:1] == ["--timeout"]:
        timeout = float(argv[1])
        argv = argv[2:]
    support.use_resources = ["subprocess", "decimal", "walltime"]
    support.verbose = 0
    # regrtest's own defaults that tests read
    support.failfast = False
    importlib.invalidate_caches()
    # as regrtest does: the tests write their files (support's TESTFN) into
    # the working directory, a fresh one under $HOME (exec-able in a sandbox,
    # unlike /tmp)
    base = os.environ.get("HOME") or "."
    for spec in argv:
        with os_helper.temp_cwd(os.path.join(base, "pyunit-%d" % os.getpid()), quiet=False):
            run(spec, timeout)
        sys.stdout.flush()
        sys.stderr.flush()


if __name__ == "__main__":
    main(sys.argv[1:])
