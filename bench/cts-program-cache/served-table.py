#!/usr/bin/env python3
"""v2: builds served / clBuildProgram calls per sub-test in (c), (d), (e) of logs-v2 (the form of logs/served-per-subtest.txt)."""
import importlib.util, sys, io, contextlib
spec = importlib.util.spec_from_file_location('c', '/work/cts/scripts/v2-classify.py')
m = importlib.util.module_from_spec(spec)
with contextlib.redirect_stdout(io.StringIO()):
    spec.loader.exec_module(m)
for suite in m.SUITES:
    names = [l.strip() for l in open(f'{m.R}/{suite}.list') if l.strip()]
    print(f'test_{suite}: sub-test  served/clBuildProgram in c d e')
    for n in names:
        v = [m.served(c, suite, n) for c in 'cde']
        if any(b for _, b in v):
            print(f'  {n:50} ' + '  '.join(f'{a}/{b}' for a, b in v))
