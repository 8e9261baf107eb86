#!/bin/sh
# Checks a Spin toolbox root (rootfs/build-rootfs.sh --profile spin): every Python
# module and every npm package is imported and used once, inside a moat sandbox.
#   usage: tests/spin/check-toolbox.sh ROOTFS MOAT_BIN
# TAP (tools/tap.sh): one line per module, "ok N - LANG NAME" or "not ok N - LANG
# NAME: exit N: why"; exit 0 only when all pass.
# Runs as whoever calls it (root, or e.g. uid 65534 with a moat it can execute).
set -u
ROOTFS=${1:?usage: check-toolbox.sh ROOTFS MOAT_BIN}
MOAT=${2:?usage: check-toolbox.sh ROOTFS MOAT_BIN}
[ -d "$ROOTFS" ] || { echo "check-toolbox: $ROOTFS is not a directory" >&2; exit 2; }
[ -x "$MOAT" ] || { echo "check-toolbox: $MOAT is not executable" >&2; exit 2; }
TIMEOUT=${CHECK_TOOLBOX_TIMEOUT:-60s}

pass=0
fail=0
out=$(mktemp) && err=$(mktemp) || exit 2
trap 'rm -f "$out" "$err"' EXIT

# check LANG NAME CODE: the program must exit 0 and print exactly "ok"
check() {
	"$MOAT" run --rootfs "$ROOTFS" --timeout "$TIMEOUT" -l "$1" -c "$3" </dev/null >"$out" 2>"$err"
	rc=$?
	if [ "$rc" -eq 0 ] && [ "$(cat "$out")" = ok ]; then
		printf 'ok %d - %s %s\n' $((pass + fail + 1)) "$1" "$2"
		pass=$((pass + 1))
	else
		# the error line (Python's last line; node's "XError: ..." above its stack)
		why=$(grep -E '^[A-Za-z_.]*(Error|Exception)\b' "$err" | tail -n 1)
		[ -n "$why" ] || why=$(grep -v '^[[:space:]]*$' "$err" | tail -n 1)
		[ -n "$why" ] || why="stdout: $(head -c 200 "$out" | tr '\n' ' ')"
		printf 'not ok %d - %s %s: exit %s: %s\n' $((pass + fail + 1)) "$1" "$2" "$rc" "$why"
		fail=$((fail + 1))
	fi
}

# --- Python (Debian packages) ---
check python numpy 'import numpy
assert int(numpy.arange(3).sum()) == 3
assert numpy.linalg.det(numpy.eye(2)) == 1.0
print("ok")'
check python tabulate 'from tabulate import tabulate
t = tabulate([["x", 1]], headers=["k", "v"])
assert "x" in t and "k" in t
print("ok")'
check python markdown 'import markdown
assert markdown.markdown("# hi") == "<h1>hi</h1>"
print("ok")'
check python jinja2 'import jinja2
assert jinja2.Template("{{ a }}!").render(a=1) == "1!"
print("ok")'
check python regex 'import regex
assert regex.match(r"\p{Lu}+", "ABc").group() == "AB"
print("ok")'
check python bs4 'from bs4 import BeautifulSoup
assert BeautifulSoup("<p>hi</p>", "html.parser").p.text == "hi"
print("ok")'
check python sqlalchemy 'import sqlalchemy as sa
with sa.create_engine("sqlite://").connect() as c:
    assert c.execute(sa.text("select 1 + 1")).scalar() == 2
print("ok")'
check python pydantic 'import pydantic
class M(pydantic.BaseModel):
    x: int
assert M(x="3").x == 3
print("ok")'
check python yaml 'import yaml
assert yaml.safe_load("a: [1, 2]") == {"a": [1, 2]}
print("ok")'
check python all-together 'import numpy, tabulate, markdown, jinja2, regex, bs4, sqlalchemy, pydantic, yaml
print("ok")'

# --- TypeScript (npm packages in the root's /node_modules) ---
check typescript cheerio 'import * as cheerio from "cheerio";
const $ = cheerio.load("<p class=\"x\">hi</p>");
const t: string = $("p.x").text();
if (t !== "hi") throw new Error(t);
console.log("ok");'
check typescript node-html-parser 'import { parse } from "node-html-parser";
const b = parse("<div><b>hi</b></div>").querySelector("b");
if (b?.text !== "hi") throw new Error(String(b));
console.log("ok");'
check typescript zod 'import { z } from "zod";
const S = z.object({ n: z.number() });
const v: z.infer<typeof S> = S.parse({ n: 1 });
if (v.n !== 1 || S.safeParse({ n: "x" }).success) throw new Error("zod");
console.log("ok");'
check typescript js-yaml 'import * as yaml from "js-yaml";
const v = yaml.load("a: [1, 2]") as { a: number[] };
if (v.a[1] !== 2 || yaml.dump({ b: 1 }).trim() !== "b: 1") throw new Error("js-yaml");
console.log("ok");'
check typescript nanoid 'import { nanoid } from "nanoid";
const id: string = nanoid();
if (id.length !== 21) throw new Error(id);
console.log("ok");'
check typescript ulidx 'import { ulid, decodeTime } from "ulidx";
const id: string = ulid();
if (id.length !== 26 || Math.abs(decodeTime(id) - Date.now()) > 60000) throw new Error(id);
console.log("ok");'
check typescript uuid 'import { v4, v7, validate } from "uuid";
if (!validate(v4()) || !validate(v7())) throw new Error("uuid");
console.log("ok");'
check typescript lodash 'import _ from "lodash";
if (_.chunk([1, 2, 3], 2).length !== 2 || _.sum([1, 2]) !== 3) throw new Error("lodash");
console.log("ok");'
check typescript date-fns 'import { addDays, format } from "date-fns";
const s: string = format(addDays(new Date(2024, 0, 31), 1), "yyyy-MM-dd");
if (s !== "2024-02-01") throw new Error(s);
console.log("ok");'
check typescript dayjs 'import dayjs from "dayjs";
const s: string = dayjs("2024-01-31").add(1, "day").format("YYYY-MM-DD");
if (s !== "2024-02-01") throw new Error(s);
console.log("ok");'
check typescript all-together 'import * as cheerio from "cheerio";
import { parse } from "node-html-parser";
import { z } from "zod";
import * as yaml from "js-yaml";
import { nanoid } from "nanoid";
import { ulid } from "ulidx";
import { v4 } from "uuid";
import _ from "lodash";
import { format } from "date-fns";
import dayjs from "dayjs";
const used = [cheerio.load, parse, z.string, yaml.load, nanoid, ulid, v4, _.chunk, format, dayjs];
if (used.some((f) => typeof f !== "function")) throw new Error("missing export");
console.log("ok");'

echo "1..$((pass + fail))"
echo "# check-toolbox: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
