"""Turns the clshim trace records of bench/query_cost.sh into a Markdown report: per
platform and case, the median build time and the median times of the two binary queries
(CL_PROGRAM_BINARY_SIZES with a value buffer, then CL_PROGRAM_BINARIES), the query's
share of build + query, and pocl's query time over each other platform's for the same
kernels.

Usage: query_cost.py [--started ...] [--repeats N] [--cases "4x1 ..."] [--commit C]
                     [--cpu NAME] [--cores N] [--info TEXT] [--loader TEXT] [--shim TEXT]
                     TRACES_DIR
(TRACES_DIR holds one folder per case, each with clshim-*.jsonl files.)
"""
import argparse
import glob
import json
import os
import statistics


def load(folder):
    """(platform, event, param) -> list of seconds."""
    out = {}
    for f in glob.glob(os.path.join(folder, "clshim-*.jsonl")):
        for line in open(f):
            r = json.loads(line)
            if r["event"] not in ("build", "binary_query") or r.get("result") != 0:
                continue
            plat = r["devices"][0]["platform"]
            key = (plat, r["event"], r.get("param"))
            out.setdefault(key, []).append(r["seconds"])
    return out


def ms(x):
    return f"{x * 1e3:.3f}" if x < 0.01 else f"{x * 1e3:.1f}"


def main():
    ap = argparse.ArgumentParser()
    for a in ("--started", "--commit", "--cpu", "--cores", "--info", "--loader", "--cases"):
        ap.add_argument(a, default="?")
    ap.add_argument("--shim", default="release build")
    ap.add_argument("--repeats", default="?")
    ap.add_argument("traces")
    a = ap.parse_args()
    rows = []
    for case in a.cases.split():
        data = load(os.path.join(a.traces, case))
        per = {}
        for plat in sorted({k[0] for k in data}):
            b = data.get((plat, "build", None), [])
            s = data.get((plat, "binary_query", "CL_PROGRAM_BINARY_SIZES"), [])
            q = data.get((plat, "binary_query", "CL_PROGRAM_BINARIES"), [])
            if not (b and s and q):
                continue
            per[plat] = (statistics.median(b), statistics.median(s), statistics.median(q), len(b))
        for plat, (b, s, q, n) in per.items():
            rows.append((case, plat, b, s, q, n))
    names = sorted({p for _, p, _, _, _, _ in rows})
    others = [p for p in names if "Portable" not in p]
    print(f"# Binary-query cost: {' beside '.join(names)}, same kernels\n")
    print("The time of `CL_PROGRAM_BINARY_SIZES` (with a value buffer) and `CL_PROGRAM_BINARIES`")
    print("right after `clBuildProgram` from source, on each platform's device of the same")
    print("machine, behind one ICD loader, for the same kernels (a new `--seed` constant per run,")
    print("so no cache answers), as recorded by clshim (`CLSHIM_BINARIES=pass`: it only")
    print("records). Produced by `bench/query_cost.sh` (which calls `bench/query_cost.py`).\n")
    print(f"- **Date**: {a.started}; {a.repeats} repeats of every case, platform order rotating.")
    print(f"- **Machine**: {a.cpu}, {a.cores} cores, shared with other work (read ratios, not absolutes).")
    print(f"- **Loader**: {a.loader}.")
    for line in a.info.splitlines():
        print(f"- **Platform**: {line}")
    print(f"- **clshim**: commit {a.commit}, {a.shim}.")
    print("- **Program**: `bench/query_timing.c`: N kernels of S statements")
    print("  (`bench/workload.py`'s `sum_k`), each built, queried, run and checked; a cold pocl")
    print("  kernel cache per run. Times are medians over every kernel of every repeat.\n")
    print("| case (kernels x statements) | platform | builds | build ms | SIZES query ms | BINARIES query ms | query / (build + query) |")
    print("|---|---|---|---|---|---|---|")
    for case, plat, b, s, q, n in rows:
        share = (s + q) / (b + s + q)
        print(f"| {case} | {plat} | {n} | {ms(b)} | {ms(s)} | {ms(q)} | {share:.0%} |")
    print()
    if not others or not any("Portable" in p for p in names):
        others = []
    if others:
        print("pocl's SIZES query over the other platforms', per case (same kernels, same run):\n")
        print("| case | " + " | ".join(f"pocl / {o}" for o in others) + " |")
        print("|---|" + "---|" * len(others))
        by = {(c, p): s for c, p, _, s, _, _ in rows}
        for case in a.cases.split():
            pocl = [v for (c, p), v in by.items() if c == case and "Portable" in p]
            cells = [f"{pocl[0] / by[(case, o)]:,.0f}x" if pocl and by.get((case, o)) else "-" for o in others]
            print(f"| {case} | " + " | ".join(cells) + " |")
        print()
    print("Reading: pocl compiles every kernel again as a generic work-group function on the")
    print("SIZES query, so its cost grows with the kernel; a platform that hands out the binary")
    print("it already built answers in microseconds whatever the kernel. This is why clshim's")
    print("default device filter (`pocl-cpu`) leaves other platforms' binaries alone:")
    print("substituting them would save nothing.")


if __name__ == "__main__":
    main()
