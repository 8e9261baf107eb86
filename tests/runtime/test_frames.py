"""The MOATPOOL2 frame's shared vectors (tests/fixtures/frames/moatpool2.json),
read by runtime/python/moat_pool.py's parser: what the C side writes is what
the bootstrap gets back, and every malformed body is refused. The same vectors
are checked by tests/unit/test_pool.c and tests/runtime/frames.test.cjs.

Run: /usr/bin/python3 -m unittest discover -s tests/runtime -p 'test_*.py'
"""
import json
import os
import sys
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "runtime", "python"))
import moat_pool  # noqa: E402

with open(os.path.join(ROOT, "tests", "fixtures", "frames", "moatpool2.json"), encoding="utf-8") as f:
    VECTORS = json.load(f)


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


if __name__ == "__main__":
    unittest.main()
