#!/usr/bin/env python3
"""The system calls a sandboxed program made, from `strace -f --decode-pids=pidns`
output of moat runs (policies/evidence/README.md).

Only the program's side counts: pid 2 of each sandbox (the clone that returned
2 in the new pid namespace) from its first successful execve on, and every
process or thread it makes after that. A descendant of pid 2 made before its
execve (TypeScript's esbuild, forked by pid 2) counts from its own successful
execve. moat's supervisor, pid 1 and pid 2's set-up before execve (Landlock,
seccomp, the failed execve of the PATH candidates) are moat's, not the
workload's: they are under no filter of the program's.

usage: extract.py TRACE... > calls.txt
Prints one line per name: "name<TAB>calls<TAB>refused", sorted by name, where
refused counts the calls answered EPERM or ENOSYS (what the filter answers).
"""
import re
import sys
from collections import defaultdict

LINE = re.compile(r'^(\d+)\s+(?:<\.\.\. (\w+) resumed>|(\w+)\()')
RET = re.compile(r'\)\s+= (-?\d+|\?)(?: /\* (\d+) in strace\'s PID NS \*/)?(?: (E[A-Z0-9]+))?')
FORKS = {"clone", "clone3", "fork", "vfork"}


def scan(path, counts, refused):
    with open(path, errors="replace") as f:
        lines = f.readlines()
    # pass 1: who made whom (a child's first lines come before its parent's
    # fork returns), and which forks made a pid 2
    parent, is_pid2 = {}, set()
    for line in lines:
        m = LINE.match(line)
        r = RET.search(line) if m else None
        if r and (m.group(2) or m.group(3)) in FORKS and r.group(2):
            child = int(r.group(2))
            parent[child] = int(m.group(1))
            if r.group(1) == "2":
                is_pid2.add(child)
    # pass 2: pid -> "prog" (counted) or "pre" (pid 2 or its descendant
    # before its own execve)
    state = {}
    for line in lines:
        m = LINE.match(line)
        if not m:
            continue
        pid = int(m.group(1))
        if pid not in state:
            p = parent.get(pid)
            if pid in is_pid2 or (p is not None and state.get(p) == "pre"):
                state[pid] = "pre"
            elif p is not None and state.get(p) == "prog":
                state[pid] = "prog"
            else:
                state[pid] = None
        resumed = m.group(2) is not None
        name = m.group(2) or m.group(3)
        st = state[pid]
        if st == "prog" and not resumed:
            counts[name] += 1
        if line.rstrip().endswith("<unfinished ...>"):
            continue
        r = RET.search(line)
        if not r:
            continue
        if st == "prog" and r.group(3) in ("EPERM", "ENOSYS"):
            refused[name] += 1
        if name in ("execve", "execveat") and r.group(1) == "0" and st == "pre":
            state[pid] = "prog"
            counts[name] += 1


def main():
    counts, refused = defaultdict(int), defaultdict(int)
    for p in sys.argv[1:]:
        scan(p, counts, refused)
    for n in sorted(counts):
        print(f"{n}\t{counts[n]}\t{refused[n]}")


if __name__ == "__main__":
    main()
