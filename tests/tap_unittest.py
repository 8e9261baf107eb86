"""python3 -m unittest discovery reported in TAP (tools/tap.sh), one line a test:
"ok N - test", "not ok N - test" (the traceback as "# " comments), "ok N - test
# SKIP why"; exit status 1 on a failure.

    python3 tests/tap_unittest.py DIR [PATTERN]   (PATTERN: test_*.py)
"""
import sys
import unittest


class TapResult(unittest.TestResult):
    def __init__(self):
        super().__init__()
        self.n = 0

    def _line(self, ok, test, directive=""):
        self.n += 1
        print("%s %d - %s%s" % ("ok" if ok else "not ok", self.n, test.id(), directive), flush=True)

    def addSuccess(self, test):
        super().addSuccess(test)
        self._line(True, test)

    def _bad(self, test, err, kind):
        self._line(False, test)
        text = self._exc_info_to_string(err, test)
        for line in ("%s\n%s" % (kind, text)).splitlines():
            print("# " + line)

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self._bad(test, err, "FAIL")

    def addError(self, test, err):
        super().addError(test, err)
        self._bad(test, err, "ERROR")

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        self._line(True, test, " # SKIP " + reason.replace("\n", " "))

    def addSubTest(self, test, subtest, err):
        # a failed subTest fails its test, which then reports nothing itself
        super().addSubTest(test, subtest, err)
        if err is not None:
            self._bad(subtest, err, "FAIL" if issubclass(err[0], test.failureException) else "ERROR")

    def addExpectedFailure(self, test, err):
        super().addExpectedFailure(test, err)
        self._line(True, test, " # TODO expected failure")

    def addUnexpectedSuccess(self, test):
        super().addUnexpectedSuccess(test)
        self._line(False, test, " # unexpected success")


def main(argv):
    start = argv[1] if len(argv) > 1 else "."
    pattern = argv[2] if len(argv) > 2 else "test_*.py"
    suite = unittest.defaultTestLoader.discover(start, pattern=pattern, top_level_dir=start)
    result = TapResult()
    suite.run(result)
    print("1..%d" % result.n)
    return 0 if result.wasSuccessful() and result.n else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
