"""Conformance of moat's `spin_sdk.key_value` and `spin_sdk.util` with Spin's
Python SDK, in SDK 4's async spelling and SDK 3's synchronous one.

Upstream (spinframework/spin-python-sdk):
- src/spin_sdk/key_value.py at v4.0.0: `async def open(name)`, `async def open_default()`,
  errors raised as `componentize_py_types.Err(Error_NoSuchStore | Error_AccessDenied |
  Error_StoreTableFull | Error_Other(str))`
- examples/spin-kv/app.py at v4.0.0: `with await key_value.open_default() as a`,
  `await a.set/get/exists/delete`, `await util.collect(await a.get_keys())`
- src/spin_sdk/util.py at v4.0.0: `async def collect(tuple)`
- src/spin_sdk/key_value.py before 4.0.0 (commit e9887a3^): synchronous `open`/`open_default`

The broker is tests/runtime/test_key_value.py's FakeBroker.
"""

import asyncio
import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
for p in (os.path.join(ROOT, "runtime", "python"), os.path.join(ROOT, "tests", "runtime")):
    if p not in sys.path:
        sys.path.insert(0, p)

from componentize_py_types import Err  # noqa: E402
from spin_sdk import key_value, util  # noqa: E402
from test_key_value import KvTestCase  # noqa: E402


class TestSdk4Async(KvTestCase):
    def test_example_app(self):
        # examples/spin-kv/app.py (v4.0.0), step by step
        async def handler():
            out = []
            with await key_value.open_default() as a:
                await a.set("test", bytes("hello world!", "utf-8"))
                out.append(await util.collect(await a.get_keys()))
                out.append(await a.exists("test"))
                out.append(await a.get("test"))
                await a.delete("test")
                out.append(await util.collect(await a.get_keys()))
                out.append(await a.get("test"))
            return out
        self.assertEqual(asyncio.run(handler()), [["test"], True, b"hello world!", [], None])

    def test_await_open_by_name(self):
        async def handler():
            store = await key_value.open("default")
            await store.set("k", b"v")
            return await store.get("k")
        self.assertEqual(asyncio.run(handler()), b"v")

    def test_errors_are_err_with_the_sdk_variant(self):
        # key_value.py (v4.0.0) docstrings: Err(Error_NoSuchStore) for an unknown label
        async def other():
            await key_value.open("other")
        with self.assertRaises(Err) as cm:
            asyncio.run(other())
        self.assertIsInstance(cm.exception.value, key_value.Error_NoSuchStore)
        self.assertIsInstance(cm.exception, key_value.Error)      # moat's own type, still
        self.assertEqual(cm.exception.kind, "no_such_store")
        with self.assertRaises(Err) as cm:
            key_value.open_default().set("", b"x")
        self.assertIsInstance(cm.exception.value, key_value.Error_Other)
        self.assertEqual(cm.exception.value.value, str(cm.exception))

    def test_access_denied_variant(self):
        saved = os.environ.pop("MOAT_KV_FD")
        key_value._conn = None
        try:
            with self.assertRaises(Err) as cm:
                key_value.open_default()
            self.assertIsInstance(cm.exception.value, key_value.Error_AccessDenied)
        finally:
            os.environ["MOAT_KV_FD"] = saved


class TestSdk3Sync(KvTestCase):
    def test_every_method_unchanged(self):
        # key_value.py before 4.0.0: open_default() returns the Store, methods synchronous
        store = key_value.open_default()
        self.assertIsInstance(store, key_value.Store)
        store.set("a", b"1")
        self.assertEqual((store.get("a"), store.exists("a"), store.get_keys()), (b"1", True, ["a"]))
        store.delete("a")
        self.assertEqual((store.get("a"), store.exists("a"), store.get_keys()), (None, False, []))
        with key_value.open("default") as s:
            self.assertEqual(s.get("a"), None)


if __name__ == "__main__":
    unittest.main()
