#!/usr/bin/env python3
"""One line per clshim trace folder: what was recorded, and how the binary queries were
treated per device (standard library only).

    trace_summary.py DIR [DIR...]

prints, per DIR:

    DIR files=F process=P build=B compile=C link=L binary_query=Q binary_load=D
        policy=... filter=... mode=... results=CL_SUCCESS:n,...
        devices=NAME(platform,matched=..):actions=forward:n,...
        sizes_s=... binaries_s=... build_s=...

`devices` lists, for every device seen in a binary query, the actions clshim took on it
(one per device entry of the record's `actions`), so an unmatched device (NVIDIA under
the default CLSHIM_DEVICES=pocl-cpu) must show only `forward`. Exit 1 when a folder has
no trace file or a line is not JSON.
"""
import collections
import json
import sys
from pathlib import Path


def summarise(d):
    files = sorted(Path(d).glob("*.jsonl"))
    if not files:
        return f"{d} NO TRACE FILES", False
    ev = collections.Counter()
    results = collections.Counter()
    secs = collections.Counter()
    per_dev = collections.defaultdict(collections.Counter)
    heads = set()
    ok = True
    for f in files:
        for n, line in enumerate(f.read_text().splitlines(), 1):
            try:
                r = json.loads(line)
            except ValueError:
                ok = False
                print(f"{f}:{n}: not JSON", file=sys.stderr)
                continue
            e = r.get("event")
            ev[e] += 1
            if e == "process":
                heads.add((r.get("policy"), r.get("devices_filter"), r.get("mode")))
                continue
            if "result_name" in r:
                results[r["result_name"]] += 1
            if e == "binary_query":
                secs[r.get("param")] += r.get("seconds", 0)
                for dev, act in zip(r.get("devices") or [], r.get("actions") or []):
                    key = f"{dev.get('name')}({dev.get('platform')},matched={dev.get('matched')})"
                    per_dev[key][act] += 1
            elif e in ("build", "compile", "link"):
                secs[e] += r.get("seconds", 0)
    out = [f"{d} files={len(files)}"]
    out += [f"{k}={ev.get(k, 0)}" for k in ("process", "build", "compile", "link",
                                            "binary_query", "binary_load")]
    out.append("heads=" + ";".join(f"policy={p},filter={fl},mode={m}" for p, fl, m in sorted(heads, key=str)))
    out.append("results=" + ",".join(f"{k}:{v}" for k, v in sorted(results.items())))
    for key, acts in sorted(per_dev.items()):
        out.append(f"device={key.replace(' ', '_')}:" + ",".join(f"{a}:{n}" for a, n in sorted(acts.items())))
    out.append(" ".join(f"{k}_s={v:.4f}" for k, v in sorted(secs.items())))
    return " ".join(out), ok


def main(argv):
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    rc = 0
    for d in argv:
        line, ok = summarise(d)
        print(line)
        if not ok or "NO TRACE FILES" in line:
            rc = 1
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
