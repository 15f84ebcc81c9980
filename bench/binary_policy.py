#!/usr/bin/env python3
"""Benchmark of clshim's binary policies on pocl's CPU driver.

Runs bench/workload.py (pyopencl 2023.1, which still caches binaries on pocl) under
`mpiexec -n R` for each rank count R, every rank with its own cold caches
(bench/rank_env.sh), in these configurations:

  a        caching on, no shim
  b        PYOPENCL_NO_CACHE=1, no shim
  c        caching on, shim with CLSHIM_BINARIES=substitute
  d        caching on, shim with CLSHIM_BINARIES=suppress
  b-warm   b again on the same cache directories (pocl's kcache is warm)
  c-warm   c again on the same cache directories (pyopencl's cache hits; the shim
           turns its binary back into a source build, served by pocl's kcache)

and prints the wall-clock time of the whole mpiexec and the largest in-process build
time over the ranks (workload.py's build_s: Program.build(), which includes the binary
query) and the largest build + first-run time (first_run_s adds the first enqueue of
every kernel, where pocl compiles the size-specialised kernel), then the ratios to (b).
With --repeat K each cell is the median of K runs, each on fresh cold caches.
With --launcher procs no MPI launcher is used: R processes of bench/rank_env.sh start at
once, each with PMI_RANK (0..R-1) and PMI_SIZE=R set, as mpich's mpiexec sets them, and
the wall clock runs until the last one exits (for machines without mpiexec). Results, logs and
clshim traces go to bench/out/ (git-ignored). Usually run through bench/binary_policy.sh,
which installs and builds what this needs first. Uses only the standard library.
"""
import argparse
import datetime
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from workload_runs import LINE, base_env, csv_ints, median, platform_info

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = {
    "a": ("(a) cache on, no shim", {}, None),
    "b": ("(b) PYOPENCL_NO_CACHE=1, no shim", {"PYOPENCL_NO_CACHE": "1"}, None),
    "c": ("(c) cache on, shim substitute", {}, "substitute"),
    "d": ("(d) cache on, shim suppress", {}, "suppress"),
    "b-warm": ("(b) warm second run", {"PYOPENCL_NO_CACHE": "1"}, None),
    "c-warm": ("(c) warm second run", {}, "substitute"),
}
ORDER = ["a", "b", "b-warm", "c", "c-warm", "d"]
TABLE_ORDER = ["a", "b", "c", "d", "b-warm", "c-warm"]
def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--ranks", type=csv_ints, default=[1, 2, 4],
                    help="comma-separated rank counts (default 1,2,4)")
    ap.add_argument("-n", "--kernels", type=int, default=4, help="kernels per rank (default 4)")
    ap.add_argument("-s", "--statements", type=int, default=300,
                    help="statements per kernel (default 300)")
    ap.add_argument("--configs", default=",".join(ORDER),
                    help="comma-separated subset of " + ",".join(ORDER) + " (default all)")
    ap.add_argument("--python", default=str(ROOT / ".venv/old/bin/python"),
                    help="Python with pyopencl 2023.1 (default .venv/old/bin/python)")
    ap.add_argument("--shim", default=str(ROOT / "target/release/libclshim.so"),
                    help="libclshim.so (default target/release/libclshim.so)")
    ap.add_argument("--mpiexec", default=shutil.which("mpiexec.mpich") or "mpiexec",
                    help="MPI launcher (default mpiexec.mpich, else mpiexec)")
    ap.add_argument("--launcher", choices=("mpiexec", "procs"), default="mpiexec",
                    help="mpiexec (default), or procs: start R processes with PMI_RANK/PMI_SIZE"
                         " set, no MPI launcher")
    ap.add_argument("--out", default=str(ROOT / "bench/out"), help="output folder (default bench/out)")
    ap.add_argument("--repeat", type=int, default=1,
                    help="runs per cell, each on fresh caches; the table shows medians (default 1)")
    ap.add_argument("--keep-caches", action="store_true",
                    help="keep the cache folders (they are deleted after the run by default)")
    args = ap.parse_args(argv)
    args.configs = [c for c in args.configs.split(",") if c]
    for c in args.configs:
        if c not in CONFIGS:
            ap.error(f"unknown config {c!r}; known: {', '.join(ORDER)}")
    for c in ("b", "c"):
        if f"{c}-warm" in args.configs and c not in args.configs:
            ap.error(f"{c}-warm needs {c} (it reuses {c}'s cache folders)")
    if args.repeat < 1:
        ap.error("--repeat must be at least 1")
    if not args.ranks or min(args.ranks) < 1:
        ap.error("--ranks needs positive rank counts")
    return args


def run_one(args, run_dir, config, ranks, rep):
    label, extra_env, policy = CONFIGS[config]
    cold = config.removesuffix("-warm")
    tag = f"R{ranks}" + (f"_{rep}" if args.repeat > 1 else "")
    cache_root = run_dir / "caches" / f"{cold}_{tag}"
    env = base_env()
    env.update(extra_env)
    if policy:
        env["CLSHIM_BENCH_PRELOAD"] = str(Path(args.shim).resolve())
        env["CLSHIM_BINARIES"] = policy
        env["CLSHIM_TRACE_DIR"] = str(run_dir / "traces" / f"{config}_{tag}")
    cmd = [args.mpiexec, "-n", str(ranks), str(ROOT / "bench/rank_env.sh"), str(cache_root),
           args.python, str(ROOT / "bench/workload.py"),
           "--kernels", str(args.kernels), "--statements", str(args.statements)]
    t0 = time.monotonic()
    if args.launcher == "procs":
        p = run_procs(cmd[3:], env, ranks)
    else:
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    wall = time.monotonic() - t0
    logs = run_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    (logs / f"{config}_{tag}.out").write_text(p.stdout)
    (logs / f"{config}_{tag}.err").write_text(p.stderr)
    lines = list(LINE.finditer(p.stdout))
    ok = p.returncode == 0 and len(lines) == ranks and all(m.group(5) == "ok" for m in lines)
    res = {
        "config": config, "label": label, "ranks": ranks, "repeat": rep, "ok": ok, "returncode": p.returncode,
        "wall_s": round(wall, 3),
        "build_max_s": max((float(m.group(2)) for m in lines), default=None),
        "first_run_max_s": max((float(m.group(3)) for m in lines), default=None),
        "total_max_s": max((float(m.group(2)) + float(m.group(3)) for m in lines), default=None),
        "stderr_lines": len(p.stderr.splitlines()),
    }
    status = "ok" if ok else f"FAILED (exit {p.returncode}, {len(lines)}/{ranks} ranks reported; see {logs}/{config}_{tag}.err)"
    print(f"  R={ranks} {label:34s} wall {wall:7.2f} s  build max {res['build_max_s'] or 0:7.3f} s"
          f"  build+run max {res['total_max_s'] or 0:7.3f} s  {status}",
          file=sys.stderr, flush=True)
    return res


def run_procs(cmd, env, ranks):
    """Starts `ranks` copies of cmd at once, rank r with PMI_RANK=r and PMI_SIZE=ranks,
    each writing to its own temporary files; returns a CompletedProcess-like object with
    the ranks' stdout and stderr concatenated in rank order and the first non-zero exit
    status (0 if all succeeded)."""
    import tempfile
    procs = []
    for r in range(ranks):
        e = dict(env, PMI_RANK=str(r), PMI_SIZE=str(ranks))
        out, err = tempfile.TemporaryFile("w+"), tempfile.TemporaryFile("w+")
        procs.append((subprocess.Popen(cmd, env=e, stdout=out, stderr=err,
                                       stdin=subprocess.DEVNULL, text=True), out, err))
    codes = [pr.wait() for pr, _, _ in procs]
    texts = []
    for _, out, err in procs:
        out.seek(0)
        err.seek(0)
        texts.append((out.read(), err.read()))
        out.close()
        err.close()
    return subprocess.CompletedProcess(cmd, next((c for c in codes if c), 0),
                                       "".join(t[0] for t in texts), "".join(t[1] for t in texts))


def aggregate(runs):
    """One table cell from the runs of one (config, ranks): medians; failed if any failed."""
    cell = {"ok": all(r["ok"] for r in runs), "runs": len(runs)}
    for key in ("wall_s", "build_max_s", "total_max_s"):
        vals = [r[key] for r in runs if r[key] is not None]
        cell[key] = median(vals) if cell["ok"] and vals else None
    return cell


def fmt(x, width=8, prec=2):
    return f"{x:{width}.{prec}f}" if isinstance(x, (int, float)) else f"{'-':>{width}}"


METRICS = (("wall_s", "wall", 2), ("build_max_s", "build", 3), ("total_max_s", "build+run", 3))


def table(args, cells, info):
    R = args.ranks
    out = []
    out.append(f"clshim binary-policy benchmark: {info}")
    out.append(f"workload: {args.kernels} kernels x {args.statements} statements per rank, "
               f"rank-local cold caches, {os.cpu_count()} cores"
               + (f", median of {args.repeat} runs per cell" if args.repeat > 1 else ""))
    out.append("")
    head = f"{'seconds':34s}"
    for _, name, _ in METRICS:
        head += "  |" + "".join(f"{name + ' R=' + str(r):>15s}" for r in R)
    out.append(head)
    for c in TABLE_ORDER:
        if c not in args.configs:
            continue
        row = f"{CONFIGS[c][0]:34s}"
        for key, _, prec in METRICS:
            row += "  |"
            for r in R:
                x = cells.get((c, r))
                row += f"{(fmt(x[key], 15, prec) if x and x['ok'] else 'FAIL'):>15s}"
        out.append(row)
    out.append("")
    whole = "mpiexec" if args.launcher == "mpiexec" else "launch (R processes, no mpiexec)"
    out.append(f"wall = the whole {whole}; build = max over ranks of the time in Program.build()"
               " (includes the binary query);")
    out.append("build+run = max over ranks of build + first run of every kernel (where pocl compiles"
               " the size-specialised kernel)")
    out.append("")
    out.append(f"{'ratios: wall / build / build+run':34s}" + "".join(f"{'R=' + str(r):>24s}" for r in R))
    for num, den, label in (("a", "b", "(a)/(b)  cache on vs off"),
                            ("c", "b", "(c)/(b)  substitute vs off"),
                            ("d", "b", "(d)/(b)  suppress vs off"),
                            ("c-warm", "b-warm", "warm (c)/(b)")):
        if num not in args.configs or den not in args.configs:
            continue
        row = f"{label:34s}"
        for r in R:
            n, d = cells.get((num, r)), cells.get((den, r))
            if n and d and n["ok"] and d["ok"] and all(d[k] for k, _, _ in METRICS):
                row += f"{'':6s}" + " / ".join(f"{n[k] / d[k]:4.2f}" for k, _, _ in METRICS)
            else:
                row += f"{'-':>24s}"
        out.append(row)
    return "\n".join(out)


def main(argv=None):
    args = parse_args(argv)
    if not Path(args.python).exists():
        sys.exit(f"{args.python} is missing: run bench/binary_policy.sh (or scripts/demo) to create it")
    if args.launcher == "mpiexec" and not shutil.which(args.mpiexec):
        sys.exit(f"{args.mpiexec} not found: install Debian's mpich")
    if any(CONFIGS[c][2] for c in args.configs) and not Path(args.shim).exists():
        sys.exit(f"{args.shim} is missing: run `cargo build --release` (or bench/binary_policy.sh)")
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    out = Path(args.out)
    run_dir = out / f"binary_policy-{stamp}"
    run_dir.mkdir(parents=True, exist_ok=True)
    info = platform_info(args.python, base_env())
    print(f"benchmark: {info}; output in {run_dir}", file=sys.stderr, flush=True)

    runs = []
    for r in args.ranks:
        for k in range(args.repeat):
            for c in ORDER:
                if c in args.configs:
                    runs.append(run_one(args, run_dir, c, r, k))
    cells = {(c, r): aggregate([x for x in runs if x["config"] == c and x["ranks"] == r])
             for r in args.ranks for c in args.configs}
    if not args.keep_caches:
        shutil.rmtree(run_dir / "caches", ignore_errors=True)

    text = table(args, cells, info)
    print()
    print(text)
    (run_dir / "table.txt").write_text(text + "\n")
    (run_dir / "results.json").write_text(json.dumps({
        "info": info, "kernels": args.kernels, "statements": args.statements,
        "ranks": args.ranks, "cores": os.cpu_count(), "configs": args.configs,
        "repeat": args.repeat, "runs": runs,
        "cells": [dict(config=c, ranks=r, **v) for (c, r), v in cells.items()],
    }, indent=1) + "\n")
    shutil.copyfile(run_dir / "table.txt", out / "latest.txt")
    print(f"\n(written to {run_dir}/table.txt, results.json, logs/, traces/)")
    return 0 if all(x["ok"] for x in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
