#!/usr/bin/env python3
"""Ranks of a node sharing one compile of a program (CLSHIM_SHARE_BUILDS, with the program
cache), side by side in one run: bench/workload.py (N kernels of S statements, the same
programs on every rank, current pyopencl, which keeps no binaries on pocl) under
``mpiexec -n R`` for R = 1, 2, 4, every rank on its own cold caches (``--cache-root``, as
MPI sites advise), each configuration on fresh caches and a fresh native store, the
configurations interleaved:

  no clshim          the job as users run it
  recorded           under ``clshim run`` only (what each build cost, rank by rank)
  not shared         under ``clshim run --program-cache --no-share-builds``
  shared             under ``clshim run --program-cache`` (sharing on by default)

Each configuration runs for every --rank-own K (the last K kernels differ from rank to
rank, bench/workload.py --rank-own): K = 0 is the issue's extreme case (every rank builds the
same programs), K = N/2 an MPI code whose ranks share part of their programs, K = N one where
nothing repeats (sharing can only cost there). K > 0 runs at more than one rank only.

For each: the whole job's CPU (this process's children) and wall time, and, from clshim's
records, the build CPU summed over the ranks, the builds compiled and those taken from a
peer, and the time ranks waited for a peer; from the "recorded" runs, the share of build CPU
spent on repeats (builds of a program, by source hash, options and device, that another
rank also compiled, all but the first per program). Results must be right in every run
(the workload checks them with numpy). Ratios are of medians of --repeat runs.

    bench/shared_builds.sh                          # 4 kernels x 300 statements, 1 2 4 ranks, 3 repeats
    bench/shared_builds.sh --ranks 2 4 --repeat 5 --rank-own 0
"""
import argparse
import glob
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CLSHIM = os.path.join(ROOT, "target", "release", "clshim")
LIB = os.path.join(ROOT, "target", "release", "libclshim.so")
NEW = os.path.join(ROOT, ".venv", "current", "bin", "python")
WORKLOAD = os.path.join(ROOT, "bench", "workload.py")

CONFIGS = ("no clshim", "recorded", "not shared", "shared")


def children_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def builds(traces):
    """(build CPU s summed, compiled, from a peer, seconds waited for a peer, share of build
    CPU on repeats) of a run."""
    cpu = compiled = peer = waited = 0.0
    per_program = {}
    for path in glob.glob(os.path.join(traces, "*.jsonl")):
        with open(path) as f:
            for line in f:
                r = json.loads(line)
                if r.get("event") != "build":
                    continue
                c = r.get("cpu_seconds") or 0.0
                cpu += c
                if r.get("shared") == "from_peer":
                    peer += 1
                else:
                    compiled += 1
                waited += r.get("peer_wait_seconds") or 0.0
                what = ((r.get("source") or {}).get("hash"), r.get("options"), json.dumps(r.get("devices")))
                per_program.setdefault(what, []).append(c)
    # What a perfect once-per-node sharing saves: every compile of a program but the dearest.
    repeats = sum(sum(cs) - max(cs) for cs in per_program.values())
    return cpu, int(compiled), int(peer), waited, (repeats / cpu if cpu else 0.0)


def run(config, ranks, work, d):
    """One job: (job CPU s, wall s, build CPU s, compiled, from peer, waited s, repeat share)."""
    os.makedirs(d)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("CLSHIM_") and k not in ("LD_PRELOAD", "OPENCL_LAYERS")}
    env["HOME"] = os.path.join(d, "home")
    env["TMPDIR"] = os.path.join(d, "tmp")
    os.makedirs(env["TMPDIR"])
    traces = os.path.join(d, "traces")
    job = ["mpiexec", "-n", str(ranks), NEW, WORKLOAD] + work + ["--cache-root", os.path.join(d, "caches")]
    cmd = {
        "no clshim": job,
        "recorded": [CLSHIM, "run", "--lib", LIB, "--trace-dir", traces, "--"] + job,
        "not shared": [CLSHIM, "run", "--lib", LIB, "--program-cache", "--no-share-builds",
                       "--trace-dir", traces, "--"] + job,
        "shared": [CLSHIM, "run", "--lib", LIB, "--program-cache", "--trace-dir", traces, "--"] + job,
    }[config]
    cpu0, t0 = children_cpu(), time.perf_counter()
    p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wall, cpu = time.perf_counter() - t0, children_cpu() - cpu0
    ok = [l for l in p.stdout.splitlines() if l.startswith("workload ")]
    if p.returncode != 0 or len(ok) != ranks or not all("result=ok" in l for l in ok):
        sys.exit(f"shared_builds: {config} at {ranks} ranks failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
    b = builds(traces) if os.path.isdir(traces) else (float("nan"), 0, 0, 0.0, float("nan"))
    return (cpu, wall) + b


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", "--kernels", type=int, default=4)
    ap.add_argument("-s", "--statements", type=int, default=300)
    ap.add_argument("--ranks", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--rank-own", type=int, nargs="+", default=None,
                    help="kernels of each rank's own (default: 0, N/2 and N)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "out", "shared-builds"))
    a = ap.parse_args()
    owns = a.rank_own if a.rank_own is not None else sorted({0, a.kernels // 2, a.kernels})
    shutil.rmtree(a.out, ignore_errors=True)
    cases = [(r, k) for k in owns for r in a.ranks if k == 0 or r > 1]
    rows = {(r, k, c): [] for r, k in cases for c in CONFIGS}
    for rep in range(a.repeat):
        for r, k in cases:
            work = ["-n", str(a.kernels), "-s", str(a.statements), "--rank-own", str(k)]
            for c in CONFIGS:
                d = os.path.join(a.out, f"r{r}-own{k}-{c.replace(' ', '-')}-{rep}")
                rows[(r, k, c)].append(run(c, r, work, d))
                shutil.rmtree(d, ignore_errors=True)
    med = lambda xs, i: statistics.median(x[i] for x in xs)
    print(f"shared_builds: bench/workload.py -n {a.kernels} -s {a.statements}, per-rank cold caches, "
          f"median of {a.repeat} interleaved runs")
    print(f"{'ranks':>5} {'own':>3} {'configuration':14} {'job CPU s':>10} {'wall s':>8} "
          f"{'build CPU s':>12} {'compiled':>9} {'from peer':>10} {'waited s':>9}")
    for r, k in cases:
        for c in CONFIGS:
            xs = rows[(r, k, c)]
            print(f"{r:>5} {k:>3} {c:14} {med(xs, 0):10.2f} {med(xs, 1):8.2f} {med(xs, 2):12.2f} "
                  f"{med(xs, 3):9.0f} {med(xs, 4):10.0f} {med(xs, 5):9.2f}")
    for r, k in cases:
        plain, rec = rows[(r, k, "no clshim")], rows[(r, k, "recorded")]
        shared, unshared = rows[(r, k, "shared")], rows[(r, k, "not shared")]
        print(f"{r} ranks, {k} own: repeats {100 * med(rec, 6):.0f}% of build CPU; "
              f"shared / recorded build CPU {med(shared, 2) / med(rec, 2):.2f}x, "
              f"shared / not shared build CPU {med(shared, 2) / med(unshared, 2):.2f}x; job CPU: "
              f"shared / no clshim {med(shared, 0) / med(plain, 0):.2f}x, "
              f"not shared / no clshim {med(unshared, 0) / med(plain, 0):.2f}x, "
              f"shared / not shared {med(shared, 0) / med(unshared, 0):.2f}x; "
              f"wall shared / no clshim {med(shared, 1) / med(plain, 1):.2f}x")


if __name__ == "__main__":
    main()
