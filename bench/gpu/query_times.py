#!/usr/bin/env python3
"""Per-query times from clshim trace folders, at microsecond resolution (standard library).

    query_times.py DIR [DIR...]

One row per folder: the device, the number of builds, the median build time, and the
median and largest time of the CL_PROGRAM_BINARY_SIZES and CL_PROGRAM_BINARIES queries
(with a value buffer) that followed them, as clshim recorded them; then SIZES / build,
the median over programs of each program's SIZES time over its build time.
"""
import json
import statistics as st
import sys
from pathlib import Path


def rows(d):
    recs = []
    for f in sorted(Path(d).glob("*.jsonl")):
        recs += [json.loads(line) for line in f.read_text().splitlines() if line.strip()]
    builds = {r["program"]: r for r in recs if r["event"] == "build"}
    q = {p: [r for r in recs if r["event"] == "binary_query" and r["param"] == p]
         for p in ("CL_PROGRAM_BINARY_SIZES", "CL_PROGRAM_BINARIES")}
    devs = {x["name"] for r in recs for x in r.get("devices") or []}
    ratio = [r["seconds"] / builds[r["program"]]["seconds"]
             for r in q["CL_PROGRAM_BINARY_SIZES"] if r["program"] in builds]
    sizes = [s for r in q["CL_PROGRAM_BINARY_SIZES"] for s in (r.get("sizes") or [])]
    b = [r["seconds"] for r in builds.values()]
    s = [r["seconds"] for r in q["CL_PROGRAM_BINARY_SIZES"]]
    bi = [r["seconds"] for r in q["CL_PROGRAM_BINARIES"]]
    return {
        "dir": Path(d).name, "device": ";".join(sorted(devs)), "builds": len(b),
        "build_med": st.median(b) if b else None,
        "sizes_med": st.median(s) if s else None, "sizes_max": max(s) if s else None,
        "bins_med": st.median(bi) if bi else None, "bins_max": max(bi) if bi else None,
        "ratio_med": st.median(ratio) if ratio else None,
        "binary_bytes": f"{min(sizes)}-{max(sizes)}" if sizes else "-",
    }


def fmt(x, unit=1e6, prec=0):
    return "-" if x is None else f"{x * unit:.{prec}f}"


def main(argv):
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    head = (f"{'trace folder':22s} {'device':46s} {'n':>2s} {'build ms':>9s} "
            f"{'SIZES us med/max':>19s} {'BINARIES us med/max':>20s} {'SIZES/build':>11s} {'binary bytes':>13s}")
    print(head)
    for d in argv:
        r = rows(d)
        print(f"{r['dir']:22s} {r['device'][:46]:46s} {r['builds']:2d} {fmt(r['build_med'], 1e3, 1):>9s} "
              f"{fmt(r['sizes_med']) + ' / ' + fmt(r['sizes_max']):>19s} "
              f"{fmt(r['bins_med']) + ' / ' + fmt(r['bins_max']):>20s} "
              f"{fmt(r['ratio_med'], 1, 3):>11s} {r['binary_bytes']:>13s}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
