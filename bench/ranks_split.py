#!/usr/bin/env python3
"""Why does it get slower with more ranks? Build time split into CPU and waiting.

Runs bench/workload.py (pyopencl on pocl's CPU driver, rank-local cold caches) under
`clshim run --record-only --binaries POLICY -- mpiexec -n R python bench/workload.py` for
each rank count R (clshim only records, as it did by default before 0.2: under 0.2's
defaults the ranks would share their compiles and take them from the user's store, which
is not the growth this measures), reads each run's traces with `clshim report --json`,
and prints per rank count the median over ranks of: the wall seconds of builds and binary queries, their CPU
seconds (the calling thread's, where pocl compiles) and the difference (waiting), and
the same for first launches (CPU of pocl's worker threads, which also run the kernel);
then how the growth over the first rank count splits into CPU and waiting.

With --repeat K each cell is the median of K runs; the runs are interleaved (every rank
count once, then again), so a change in the machine's load touches all rank counts
alike. CPU time is the figure to trust on a shared machine: wall time there includes
other people's work. --env and --mpiexec-args change every run (for instance
`--env POCL_MAX_PTHREAD_COUNT=1` or `--mpiexec-args="--bind-to core"`), --label names
the variant in the table. Results, logs and traces go to bench/out/ (git-ignored).
Usually run through bench/ranks_split.sh, which installs and builds what this needs.
Uses only the standard library.
"""
import argparse
import datetime
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

from workload_runs import LINE, base_env, csv_ints, median, platform_info

ROOT = Path(__file__).resolve().parent.parent
def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--ranks", type=csv_ints, default=[1, 2], help="rank counts (default 1,2)")
    ap.add_argument("-n", "--kernels", type=int, default=4, help="kernels per rank (default 4)")
    ap.add_argument("-s", "--statements", type=int, default=300,
                    help="statements per kernel (default 300)")
    ap.add_argument("--policy", default="pass", choices=("pass", "substitute", "suppress"),
                    help="clshim's binary policy (default pass: clshim only records)")
    ap.add_argument("--python", default=str(ROOT / ".venv/old/bin/python"),
                    help="Python with pyopencl (default .venv/old/bin/python, pyopencl 2023.1)")
    ap.add_argument("--workload", default=str(ROOT / "bench/workload.py"),
                    help="the workload script (default bench/workload.py)")
    ap.add_argument("--clshim", default=str(ROOT / "target/release/clshim"),
                    help="the clshim command, with libclshim.so beside it (default target/release/clshim)")
    ap.add_argument("--mpiexec", default=shutil.which("mpiexec.mpich") or "mpiexec",
                    help="MPI launcher (default mpiexec.mpich, else mpiexec)")
    ap.add_argument("--mpiexec-args", default="",
                    help="more launcher arguments, one string (Open MPI as root: "
                         "'--allow-run-as-root --oversubscribe --bind-to none')")
    ap.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                    help="a variable for every run (repeatable)")
    ap.add_argument("--label", default="", help="the variant's name in the table")
    ap.add_argument("--repeat", type=int, default=1, help="runs per rank count (default 1)")
    ap.add_argument("--out", default=str(ROOT / "bench/out"), help="output folder (default bench/out)")
    args = ap.parse_args(argv)
    if args.repeat < 1 or not args.ranks or min(args.ranks) < 1:
        ap.error("--repeat and --ranks need positive numbers")
    for e in args.env:
        if "=" not in e:
            ap.error(f"--env {e!r}: expected NAME=VALUE")
    return args


def run_env(args):
    return base_env(dict(e.split("=", 1) for e in args.env))


def run_one(args, run_dir, ranks, rep):
    tag = f"R{ranks}_{rep}"
    traces = run_dir / "traces" / tag
    caches = run_dir / "caches" / tag
    cmd = ([args.clshim, "run", "--record-only", "--binaries", args.policy,
            "--trace-dir", str(traces), "--",
            args.mpiexec, "-n", str(ranks)] + shlex.split(args.mpiexec_args)
           + [args.python, args.workload, "--cache-root", str(caches),
              "--kernels", str(args.kernels), "--statements", str(args.statements)])
    t0 = time.monotonic()
    p = subprocess.run(cmd, env=run_env(args), capture_output=True, text=True,
                       stdin=subprocess.DEVNULL)
    wall = time.monotonic() - t0
    shutil.rmtree(caches, ignore_errors=True)
    logs = run_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    (logs / f"{tag}.out").write_text(p.stdout)
    (logs / f"{tag}.err").write_text(p.stderr)
    lines = list(LINE.finditer(p.stdout))
    ok = p.returncode == 0 and len(lines) == ranks and all(m.group(5) == "ok" for m in lines)
    rep_json = subprocess.run([args.clshim, "report", "--json", str(traces)],
                              capture_output=True, text=True)
    try:
        split = json.loads(rep_json.stdout)["compiling_and_waiting"]
    except (ValueError, KeyError):
        split, ok = None, False
    res = {"ranks": ranks, "repeat": rep, "ok": ok, "returncode": p.returncode,
           "wall_s": round(wall, 3), "split": split}
    if split:
        m = split["median_per_rank"]
        b, l = m["build"], m["first_launches"]
        flags = [f for h in split["hosts"] for f, on in
                 (("ranks>cpus", h["ranks_outnumber_cpus"]), ("shared cpus", h["ranks_share_cpus"])) if on]
        res.update(build=b, launch=l, flags=flags,
                   pocl_threads=[h["pocl_worker_threads_per_rank"] for h in split["hosts"]])
        print(f"  R={ranks:<3} run {rep}: wall {wall:7.2f} s; per rank (median): build {b['wall_seconds']:.3f} s ="
              f" CPU {b['cpu_seconds']:.3f} + waiting {b['waiting_seconds']:.3f}; first launches"
              f" {l['wall_seconds']:.3f} s, CPU {l['cpu_seconds']:.3f}"
              + ("" if ok else f"  FAILED (exit {p.returncode}; see {logs}/{tag}.err)"),
              file=sys.stderr, flush=True)
    else:
        print(f"  R={ranks} run {rep}: FAILED (exit {p.returncode}; see {logs}/{tag}.err)",
              file=sys.stderr, flush=True)
    return res


def cell(runs, part, key):
    return median([r[part][key] for r in runs if r["ok"] and part in r])


def table(args, runs, info):
    out = [f"clshim ranks benchmark{' (' + args.label + ')' if args.label else ''}: {info}",
           f"workload: {args.kernels} kernels x {args.statements} statements per rank, rank-local cold caches, "
           f"policy {args.policy}, {os.cpu_count()} cores" + (f", {' '.join(args.env)}" if args.env else "")
           + (f", launcher args '{args.mpiexec_args}'" if args.mpiexec_args else "")
           + (f", median of {args.repeat} runs" if args.repeat > 1 else ""),
           "",
           f"{'ranks':>5} {'wall s':>7} | {'build s':>8} {'CPU s':>8} {'waiting':>8} {'wait%':>6} |"
           f" {'launch s':>8} {'CPU s':>8} {'waiting':>8} | flags"]
    cells = {}
    for r in args.ranks:
        rs = [x for x in runs if x["ranks"] == r]
        c = {"wall": median([x["wall_s"] for x in rs if x["ok"]])}
        for part in ("build", "launch"):
            for k in ("wall_seconds", "cpu_seconds", "waiting_seconds"):
                c[f"{part}_{k}"] = cell(rs, part, k)
        cells[r] = c
        if c["build_wall_seconds"] is None:
            out.append(f"{r:>5} FAILED")
            continue
        flags = sorted({f for x in rs for f in x.get("flags", [])})
        share = c["build_waiting_seconds"] / c["build_wall_seconds"] if c["build_wall_seconds"] else 0
        out.append(f"{r:>5} {c['wall']:7.2f} | {c['build_wall_seconds']:8.3f} {c['build_cpu_seconds']:8.3f}"
                   f" {c['build_waiting_seconds']:8.3f} {100 * share:5.0f}% |"
                   f" {c['launch_wall_seconds']:8.3f} {c['launch_cpu_seconds']:8.3f}"
                   f" {c['launch_waiting_seconds']:8.3f} | {', '.join(flags) or '-'}")
    out.append("")
    out.append("per rank, the median over ranks: build = builds and binary queries (CPU of the calling thread, where pocl")
    out.append("compiles); launch = first launches (CPU of pocl's worker threads, which also run the kernel); waiting =")
    out.append("wall - CPU, where positive. wall s = the whole clshim run + mpiexec.")
    base = cells[args.ranks[0]]
    if len(args.ranks) > 1 and base["build_wall_seconds"] is not None:
        out.append("")
        out.append(f"growth over R={args.ranks[0]}, per rank (median): build wall = CPU + waiting;"
                   " launch wall = CPU + waiting")
        for r in args.ranks[1:]:
            c = cells[r]
            if c["build_wall_seconds"] is None:
                continue
            d = {k: c[k] - base[k] for k in c if c[k] is not None and base[k] is not None}
            out.append(f"  R={r:<3} build {d['build_wall_seconds']:+.3f} s = CPU {d['build_cpu_seconds']:+.3f}"
                       f" + waiting {d['build_waiting_seconds']:+.3f}  (CPU x{c['build_cpu_seconds'] / base['build_cpu_seconds']:.2f});"
                       f"  launch {d['launch_wall_seconds']:+.3f} s, CPU {d['launch_cpu_seconds']:+.3f}")
    return "\n".join(out), cells


def main(argv=None):
    args = parse_args(argv)
    for what, path in (("Python", args.python), ("clshim", args.clshim)):
        if not (Path(path).exists() or shutil.which(path)):
            sys.exit(f"{what} {path} is missing: run bench/ranks_split.sh, which makes it")
    if not shutil.which(args.mpiexec):
        sys.exit(f"{args.mpiexec} not found: install Debian's mpich, or pass --mpiexec")
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    out = Path(args.out)
    run_dir = out / f"ranks_split-{stamp}{'-' + re.sub(r'[^A-Za-z0-9_.-]', '_', args.label) if args.label else ''}"
    run_dir.mkdir(parents=True, exist_ok=True)
    info = platform_info(args.python, run_env(args))
    print(f"benchmark: {info}; output in {run_dir}", file=sys.stderr, flush=True)
    runs = [run_one(args, run_dir, r, k) for k in range(args.repeat) for r in args.ranks]
    text, cells = table(args, runs, info)
    print()
    print(text)
    (run_dir / "table.txt").write_text(text + "\n")
    (run_dir / "results.json").write_text(json.dumps({
        "info": info, "label": args.label, "kernels": args.kernels, "statements": args.statements,
        "policy": args.policy, "env": args.env, "mpiexec_args": args.mpiexec_args,
        "ranks": args.ranks, "cores": os.cpu_count(), "repeat": args.repeat, "runs": runs,
        "cells": {str(r): c for r, c in cells.items()},
    }, indent=1) + "\n")
    print(f"\n(written to {run_dir}/table.txt, results.json, logs/, traces/)")
    return 0 if all(x["ok"] for x in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
