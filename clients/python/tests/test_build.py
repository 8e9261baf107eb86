"""The build backend (clients/python/_build/moat_build.py): its reader of pyproject.toml
before Python 3.11 reads the file as tomllib does, and refuses what it does not know; the
wheel it writes lists every file in RECORD with its sha256 (install.sh installs it)."""
from __future__ import annotations

import os
import sys
import tempfile
import unittest
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "_build"))

import moat_build  # noqa: E402


class Backend(unittest.TestCase):
    def test_subset_reader_agrees_with_tomllib(self) -> None:
        try:
            import tomllib  # type: ignore[import-not-found]
        except ImportError:
            self.skipTest("tomllib is Python 3.11's")
        with open(os.path.join(moat_build.ROOT, "pyproject.toml"), encoding="utf-8") as f:
            text = f.read()
        self.assertEqual(moat_build.parse_toml_subset(text), tomllib.loads(text))

    def test_subset_reader_refuses_what_it_cannot_read(self) -> None:
        for bad in ('[project]\nversion = 1.0\n', '[project]\nname = \'x\'\n',
                    '[project]\nname = """x"""\n', '[project]\nc = [\n "a",\n'):
            with self.assertRaises(moat_build.BuildError, msg=bad):
                moat_build.parse_toml_subset(bad)

    def test_metadata_and_hooks(self) -> None:
        self.assertEqual(moat_build.get_requires_for_build_wheel(), [])
        meta = moat_build.metadata_text()
        self.assertIn("Name: moat-sandbox\n", meta)
        self.assertIn("Requires-Python: >=3.9\n", meta)
        with tempfile.TemporaryDirectory() as d:
            name = moat_build.build_wheel(d)
            self.assertRegex(name, r"^moat_sandbox-[0-9.]+-py3-none-any\.whl$")
            again = os.path.join(d, "again")
            os.mkdir(again)
            moat_build.build_wheel(again)
            with open(os.path.join(d, name), "rb") as a, open(os.path.join(again, name), "rb") as b:
                self.assertEqual(a.read(), b.read(), "a build is not the same bytes twice")
            with zipfile.ZipFile(os.path.join(d, name)) as z:
                names = z.namelist()
                self.assertIn("moat_sandbox/__init__.py", names)
                self.assertFalse([n for n in names if "__pycache__" in n or n.endswith(".pyc")])


if __name__ == "__main__":
    unittest.main()
