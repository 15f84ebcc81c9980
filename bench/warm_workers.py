#!/usr/bin/env python3
"""`clshim warm`'s wall and CPU on one worker against several, side by side in one run: an
MPI job of bench/workload.py (current pyopencl; every rank with its own cold caches, as MPI
sites advise, and by default every kernel its own; until 2026-12-06 each rank's compiles
made a group of requests of their own, and since then, as they differ only in where their
kernel cache is, all ranks' make one group, which the step splits over its workers), run
under `clshim run --no-share-builds` (the program cache, which keeps each rank's compiles
in a fresh store; no rank waits for another), then `clshim warm --jobs J` for each J asked,
which turns every kept compile into a request (promotion) and makes the driver's binary of
each, each J on the kept compiles of a fresh job of its own, the J values taking turns at
going first. A last job on fresh caches checks that the store serves every build as the
driver's binary.

CPU is user + system of the warm step and its workers (this process's children's).
"asked" is the kept builds the job left in the store, "made" what the step made of them.
Until 0.2 the job set CLSHIM_WARM=1 to leave requests; since, the step makes the same
requests from the kept compiles.

    bench/warm_workers.sh                                  # 2 ranks, --jobs 1 and every CPU
    bench/warm_workers.sh --ranks 16 -n 8 -s 100 --jobs 1 16 --repeat 2
"""
import argparse
import os
import re
import shlex
import shutil
import statistics
import sys

from timing import timed

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NEW = os.path.join(ROOT, ".venv", "current", "bin", "python")
WORKLOAD = os.path.join(ROOT, "bench", "workload.py")



def run(cmd, env):
    cpu, wall, p = timed(cmd, env)
    if p.returncode != 0:
        sys.exit(f"warm_workers: {' '.join(cmd)} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
    return cpu, wall, p


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", "--kernels", type=int, default=4)
    ap.add_argument("-s", "--statements", type=int, default=300)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--rank-own", type=int, default=None,
                    help="kernels each rank has of its own (default: all)")
    ap.add_argument("--jobs", nargs="+", default=["1", "all"],
                    help="worker counts to compare ('all': clshim warm's default, every usable CPU)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--python", default=NEW, metavar="PATH")
    ap.add_argument("--mpiexec", default="mpiexec", metavar="WORDS")
    ap.add_argument("--clshim-dir", default=os.path.join(ROOT, "target", "release"), metavar="DIR")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "out", "warm-workers"))
    a = ap.parse_args()
    clshim = os.path.join(a.clshim_dir, "clshim")
    lib = os.path.join(a.clshim_dir, "libclshim.so")
    own = a.kernels if a.rank_own is None else a.rank_own
    shutil.rmtree(a.out, ignore_errors=True)
    base = {k: v for k, v in os.environ.items()
            if not k.startswith("CLSHIM_") and k not in ("LD_PRELOAD", "OPENCL_LAYERS")}

    def job(d, caches, extra_env, *clshim_args):
        env = dict(base, HOME=os.path.join(d, "home"), TMPDIR=os.path.join(d, "tmp"))
        env.update(extra_env)
        os.makedirs(env["TMPDIR"], exist_ok=True)
        cmd = ([clshim, "run", "--lib", lib, *clshim_args, "--"]
               + shlex.split(a.mpiexec) + ["-n", str(a.ranks), a.python, WORKLOAD,
                                           "-n", str(a.kernels), "-s", str(a.statements),
                                           "--rank-own", str(own), "--cache-root", caches])
        cpu, wall, p = run(cmd, env)
        ok = [l for l in p.stdout.splitlines() if l.startswith("workload ")]
        if len(ok) != a.ranks or not all("result=ok" in l for l in ok):
            sys.exit(f"warm_workers: wrong results:\n{p.stdout}\n{p.stderr}")
        return env, p.stderr

    rows = {j: [] for j in a.jobs}
    served = []
    for rep in range(a.repeat):
        turn = a.jobs[rep % len(a.jobs):] + a.jobs[:rep % len(a.jobs)]
        for j in turn:
            d = os.path.join(a.out, f"{rep}-{j}")
            env, _ = job(d, os.path.join(d, "caches"), {}, "--no-share-builds")
            compiles = os.path.join(d, "home", ".cache", "clshim", "native", "compiles")
            kept = sum(os.path.isfile(os.path.join(compiles, k, "build.kc"))
                       for k in os.listdir(compiles)) if os.path.isdir(compiles) else 0
            args = [clshim, "warm", "--lib", lib] + ([] if j == "all" else ["--jobs", j])
            cpu, wall, p = run(args, env)
            line = [l for l in p.stderr.splitlines() if l.startswith("clshim warm: ")][-1]
            m = re.search(r"(\d+) made,", line)
            made = int(m.group(1)) if m else 0
            rows[j].append((cpu, wall, made, kept))
            if rep == 0 and j == a.jobs[-1]:
                # The next job: a fresh node (caches and temporary folder), the same store.
                _, err = job(d, os.path.join(d, "caches-next"), {"TMPDIR": os.path.join(d, "tmp-next")})
                exits = [l for l in err.splitlines() if l.startswith("clshim: ")]
                builds = sum(int(x) for l in exits for x in re.findall(r"(\d+) builds ", l))
                native = sum(int(x) for l in exits
                             for x in re.findall(r"\((\d+) as the driver's binary\)", l))
                served.append(f"{native} of {builds} builds served as the driver's binary")
    print(f"warm_workers: bench/workload.py -n {a.kernels} -s {a.statements} --rank-own {own} under "
          f"{a.mpiexec} -n {a.ranks}, per-rank cold caches, median of {a.repeat} interleaved runs")
    print(f"{'--jobs':>8} {'CPU s':>8} {'wall s':>8} {'made':>6} {'asked':>6}  against --jobs {a.jobs[0]}")
    first = a.jobs[0]
    for j in a.jobs:
        med = lambda i: statistics.median(x[i] for x in rows[j])
        pair = lambda i: statistics.median(x[i] / y[i] for x, y in zip(rows[j], rows[first]))
        print(f"{j:>8} {med(0):8.2f} {med(1):8.2f} {min(x[2] for x in rows[j]):6d} "
              f"{max(x[3] for x in rows[j]):6d}  CPU {pair(0):.2f}x, wall {pair(1):.2f}x")
    print("the next job on fresh caches: " + (served[0] if served else "(not run)"))


if __name__ == "__main__":
    main()
