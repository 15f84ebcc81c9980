#!/usr/bin/env python3
"""Self cost (instructions) per object file in one callgrind output file, divided by N:
`callgrind_objects.py FILE N` prints `instructions<TAB>object` lines, most first.

bench/hot_path.sh uses it to tell clshim's own instructions on a launch apart from the
rest of the call (the loader's trampoline, pocl, glibc): the totals of two processes
differ by more than clshim's code, because glibc's malloc takes other paths in pocl's
enqueue once clshim's allocations sit in the heap."""
import collections
import re
import sys


def self_costs(path):
    names, totals = {}, collections.Counter()
    obj, after_calls = None, False
    for line in open(path, encoding="utf-8", errors="replace"):
        line = line.rstrip("\n")
        if line.startswith(("ob=", "cob=")):
            m = re.match(r"c?ob=\((\d+)\)(?: (.*))?", line)
            if m and m.group(2):
                names[m.group(1)] = m.group(2)
            if line.startswith("ob="):
                obj = names.get(m.group(1)) if m else line[3:]
            continue
        if line.startswith("calls="):
            after_calls = True  # the next cost line is the call's inclusive cost
            continue
        if line[:1].isdigit() or line[:1] in "+-*":
            if after_calls:
                after_calls = False
                continue
            parts = line.split()
            if len(parts) >= 2:
                totals[obj] += int(parts[1])
    return totals


if __name__ == "__main__":
    n = float(sys.argv[2])
    for obj, ir in self_costs(sys.argv[1]).most_common():
        print(f"{ir / n:.1f}\t{obj}")
