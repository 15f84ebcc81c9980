#!/usr/bin/env python3
"""v2 (logs-v2). Outcome of every sub-test in every configuration; differences against (a)."""
import json, os, re, sys, glob, collections
R = '/work/cts'
LOGS = R + '/logs-v2'   # v2: the rerun's logs
CONFIGS = ['a', 'b', 'c', 'd', 'e']
SUITES = ['compiler', 'api']

def outcome(log, name, rc):
    text = open(log, errors='replace').read()
    if rc in (124, 137):
        return 'timeout'
    if re.search(r'^%s passed$' % re.escape(name), text, re.M) and rc == 0:
        return 'passed'
    if re.search(r'^%s FAILED$' % re.escape(name), text, re.M):
        return 'failed'
    if re.search(r'^%s test not supported$' % re.escape(name), text, re.M) or \
       re.search(r'^%s skipped \(requires' % re.escape(name), text, re.M):
        return 'skipped'
    if rc > 128:
        return 'crashed(sig %d)' % (rc - 128)
    return 'other(rc %d)' % rc

def served(cfg, suite, name):
    n_store = n_builds = 0
    for f in glob.glob(f'{LOGS}/traces/{cfg}/{suite}/{name}/*.jsonl'):
        for line in open(f, errors='replace'):
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if rec.get('event') == 'build':
                n_builds += 1
                if rec.get('served') == 'store':
                    n_store += 1
    return n_store, n_builds

res = {}
for cfg in CONFIGS:
    for suite in SUITES:
        rcf = f'{LOGS}/{cfg}/{suite}/rc.txt'
        if not os.path.exists(rcf):
            continue
        for line in open(rcf):
            name, rc, secs = line.split()
            rc = int(rc)
            res[(cfg, suite, name)] = (outcome(f'{LOGS}/{cfg}/{suite}/{name}.log', name, rc), rc, float(secs))
out = {'results': {f'{c}/{s}/{n}': v for (c, s, n), v in res.items()}}
for suite in SUITES:
    names = [l.strip() for l in open(f'{R}/{suite}.list') if l.strip()]
    print(f'== test_{suite}: {len(names)} sub-tests')
    print('config  run passed failed skipped crashed timeout other  seconds  served/builds')
    for cfg in CONFIGS:
        rows = [res.get((cfg, suite, n)) for n in names]
        rows = [r for r in rows if r]
        if not rows:
            continue
        cnt = collections.Counter(r[0].split('(')[0] for r in rows)
        sv = sb = 0
        if cfg[0] in 'cde':
            for n in names:
                a, b = served(cfg, suite, n); sv += a; sb += b
        print(f'{cfg:6} {len(rows):4} {cnt["passed"]:6} {cnt["failed"]:6} {cnt["skipped"]:7} {cnt["crashed"]:7} {cnt["timeout"]:7} {cnt["other"]:5} {sum(r[2] for r in rows):8.1f}  ' + (f'{sv}/{sb}' if cfg[0] in 'cde' else ''))
    print('non-passing in (a):', ', '.join(f'{n}={res[("a",suite,n)][0]}' for n in names if ("a",suite,n) in res and res[("a",suite,n)][0] != 'passed'))
    for cfg in CONFIGS[1:]:
        diffs = [(n, res[('a', suite, n)][0], res[(cfg, suite, n)][0]) for n in names
                 if ('a', suite, n) in res and (cfg, suite, n) in res and res[('a', suite, n)][0] != res[(cfg, suite, n)][0]]
        print(f'({cfg}) vs (a): ' + ('none' if not diffs else '; '.join(f'{n}: {x} -> {y}' for n, x, y in diffs)))
    if '--served' in sys.argv:
        for cfg in 'cde':
            print(f'served per sub-test ({cfg}):', ' '.join(f'{n}={served(cfg, suite, n)[0]}/{served(cfg, suite, n)[1]}' for n in names if served(cfg, suite, n)[1]))
