"""The frames' shared vectors (tests/fixtures/frames/): the MOATPOOL2 frame
(moatpool2.json) read by runtime/python/moat_pool.py's parser -- what the C
side writes is what the bootstrap gets back, every malformed body is refused
(also checked by tests/unit/test_pool.c and tests/runtime/frames.test.cjs) --
and the handler protocol (handler.json) written by runtime/python/moat_handler.py
byte for byte as moat serve's parser reads it (tests/unit/test_serve_frames.c).

Run: /usr/bin/python3 -m unittest discover -s tests/runtime -p 'test_*.py'
"""
import json
import os
import sys
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "runtime", "python"))
import moat_handler  # noqa: E402
import moat_pool  # noqa: E402


def _vectors(name):
    with open(os.path.join(ROOT, "tests", "fixtures", "frames", name), encoding="utf-8") as f:
        return json.load(f)


VECTORS = _vectors("moatpool2.json")
HANDLER = _vectors("handler.json")


def pairs(v):
    return [(k.encode(), x.encode()) for k, x in v]


class Moatpool2Vectors(unittest.TestCase):
    def test_valid_frames_read_back(self):
        self.assertGreater(len(VECTORS["valid"]), 0)
        for v in VECTORS["valid"]:
            with self.subTest(v["name"]):
                frame = v["frame"].encode()
                head, _, rest = frame.partition(b"\n")
                self.assertTrue(head.startswith(moat_pool.MAGIC))
                n = int(head[len(moat_pool.MAGIC):])
                code, files, env = moat_pool.parse_request(rest[:n])
                self.assertEqual(code, v["code"].encode())
                self.assertEqual(files, pairs(v["files"]))
                self.assertEqual(env, pairs(v["env"]))
                self.assertEqual(rest[n:], v["stdin"].encode())

    def test_invalid_bodies_are_refused(self):
        self.assertGreater(len(VECTORS["invalid"]), 0)
        for v in VECTORS["invalid"]:
            with self.subTest(v["name"]):
                with self.assertRaises((ValueError, IndexError)):
                    moat_pool.parse_request(v["body"].encode())


class HandlerVectors(unittest.TestCase):
    def test_the_bootstrap_writes_each_stream(self):
        self.assertGreater(len(HANDLER["valid"]), 0)
        for v in HANDLER["valid"]:
            with self.subTest(v["name"]):
                r, w = os.pipe()
                s = moat_handler._Stream(w)
                s.head(v["status"], v["headers"])
                for c in v["chunks"]:
                    s.chunk(c)
                s.end()  # closes w
                out = b""
                while True:
                    b = os.read(r, 1 << 16)
                    if not b:
                        break
                    out += b
                os.close(r)
                self.assertEqual(out, v["stream"].encode("utf-8"))


if __name__ == "__main__":
    unittest.main()
