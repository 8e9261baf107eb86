"""Every module of Spin's Python SDK imports in a program run by moat, or
fails at import with one sentence saying moat does not offer it.

Upstream (spinframework/spin-python-sdk, v4.0.0): src/spin_sdk/{http/__init__,
key_value,util,variables,llm,sqlite,redis,mqtt,mysql,postgres}.py and the
generated package src/spin_sdk/wit/.
"""

import os
import subprocess
import sys
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
RUNTIME_PY = os.path.join(ROOT, "runtime", "python")
OFFERED = ("http", "key_value", "util")
NOT_OFFERED = ("variables", "llm", "sqlite", "redis", "mqtt", "mysql", "postgres", "wit")


def run(code):
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": RUNTIME_PY,
           "PYTHONDONTWRITEBYTECODE": "1"}
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=30)


class TestModules(unittest.TestCase):
    def test_offered_modules_import(self):
        for name in OFFERED:
            with self.subTest(name=name):
                p = run(f"from spin_sdk import {name}")
                self.assertEqual((p.returncode, p.stderr), (0, ""))

    def test_other_modules_say_moat_does_not_offer_them(self):
        for name in NOT_OFFERED:
            for stmt in (f"from spin_sdk import {name}", f"import spin_sdk.{name}"):
                with self.subTest(stmt=stmt):
                    p = run(stmt)
                    self.assertEqual(p.returncode, 1)
                    last = p.stderr.strip().splitlines()[-1]
                    self.assertRegex(last, rf"^ImportError: moat does not offer spin_sdk\.{name} "
                                     r"\([^()]+\): a program run by moat cannot use it$")
                    self.assertLessEqual(p.stderr.count("File "), 3, "a deep stack")

    def test_import_error_can_be_caught(self):
        # a program with a fallback keeps working
        p = run("try:\n from spin_sdk import variables\nexcept ImportError as e:\n print(e.name)")
        self.assertEqual((p.returncode, p.stdout), (0, "spin_sdk.variables\n"))

    def test_wit_submodules_too(self):
        p = run("from spin_sdk.wit.imports import spin_variables_variables_3_0_0")
        self.assertIn("moat does not offer spin_sdk.wit", p.stderr.strip().splitlines()[-1])


if __name__ == "__main__":
    unittest.main()
