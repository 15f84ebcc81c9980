#!/usr/bin/env python3
"""Ranks of a node sharing one compile of a program (CLSHIM_SHARE_BUILDS: on by default, with
the program cache, which `clshim run` turns on), side by side in one run: bench/workload.py
(N kernels of S statements, the same programs on every rank, current pyopencl, which keeps
no binaries on pocl) under ``mpiexec -n R`` for R = 1, 2, 4, every rank on its own cold
caches (``--cache-root``, as MPI sites advise), each configuration on fresh caches, a fresh
temporary folder and a fresh native store, the configurations interleaved:

  no clshim          the job as users run it
  recorded           under ``clshim run --record-only`` (what each build cost, rank by rank:
                     every rank compiles every program, as without clshim)
  not shared         under ``clshim run --no-share-builds``: the program cache without
                     sharing; no rank waits for another, but each keeps what it compiles in
                     the (fresh) store, and a rank that builds a program after another kept
                     it takes it from there, without waiting
  shared             under ``clshim run`` (its defaults: the program cache, sharing on)

Each configuration runs for every --rank-own K (the first K kernels differ from rank to
rank, bench/workload.py --rank-own): K = 0 is the issue's extreme case (every rank builds the
same programs), K = N/2 an MPI code whose ranks share part of their programs, K = N one where
nothing repeats (sharing can only cost there). K > 0 runs at more than one rank only. A
process's first compile also pays for the compiler's start in it (about 0.45 s of pocl 3.1
here); with K > 0 that compile is one of the rank's own, so the repeats' CPU is the
programs' own, as in an application that builds many programs.

For each: the whole job's CPU (this process's children) and wall time, and, from clshim's
records, the build CPU and the first launch CPU (pocl's second compile, of the kernel that runs)
summed over the ranks, the builds compiled, those taken from a peer and those taken from
the store (a peer's compile kept there, or, not shared, a compile another rank kept first),
and the time ranks waited for a peer; from the "recorded" runs, the share of build CPU
spent on repeats, as `clshim report` counts them (compiles of a program, by source hash,
options and device, on ranks other than the first to compile it; for first launches, of
the same kernel and sizes). Results must be right in every run
(the workload checks them with numpy). Ratios are of medians of --repeat runs; the
configurations take turns at going first (use a multiple of 4 repeats for a fair turn).

    bench/shared_builds.sh                          # 4 kernels x 300 statements, 1 2 4 ranks, 3 repeats
    bench/shared_builds.sh --ranks 2 4 --repeat 5 --rank-own 0
"""
import argparse
import json
import os
import resource
import shlex
import shutil
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CLSHIM = os.path.join(ROOT, "target", "release", "clshim")
LIB = os.path.join(ROOT, "target", "release", "libclshim.so")
NEW = os.path.join(ROOT, ".venv", "current", "bin", "python")
MPIEXEC = ["mpiexec"]
WORKLOAD = os.path.join(ROOT, "bench", "workload.py")

CONFIGS = ("no clshim", "recorded", "not shared", "shared")


def children_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def builds(traces):
    """From `clshim report --json` of a run's traces (its `repeats`): (build CPU s, builds
    compiled, builds from a peer, seconds builds and first launches waited for a peer,
    share of build CPU on repeats, first launch CPU s, share of build and first launch CPU
    on repeats, builds taken from the store's kept compiles). A rank that waits for its
    peer's compile often finds it kept in the store before it is published on the node, and
    takes it from there; a `clshim report` that does not count those apart (no
    `builds_from_store` in its JSON) counts them as compiled, and the last is nan."""
    p = subprocess.run([CLSHIM, "report", "--json", traces], stdout=subprocess.PIPE, text=True)
    r = json.loads(p.stdout)["repeats"]
    cpu, launch_cpu = r["build_cpu_seconds"], r["first_launch_cpu_seconds"]
    compiled = sum(x["builds"]["compiled"] for x in r["by_program"])
    rep, lrep = r["repeat_build_cpu_seconds"], r["repeat_first_launch_cpu_seconds"]
    both = cpu + launch_cpu
    return (cpu, compiled, r["builds_from_peer"], r["peer_wait_seconds"],
            rep / cpu if cpu else 0.0, launch_cpu, (rep + lrep) / both if both else 0.0,
            r.get("builds_from_store", float("nan")))


def run(config, ranks, work, d):
    """One job: (job CPU s, wall s) and builds()'s figures."""
    os.makedirs(d)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("CLSHIM_") and k not in ("LD_PRELOAD", "OPENCL_LAYERS")}
    env["HOME"] = os.path.join(d, "home")
    env["TMPDIR"] = os.path.join(d, "tmp")
    os.makedirs(env["TMPDIR"])
    traces = os.path.join(d, "traces")
    job = MPIEXEC + ["-n", str(ranks), NEW, WORKLOAD] + work + ["--cache-root", os.path.join(d, "caches")]
    cmd = {
        "no clshim": job,
        "recorded": [CLSHIM, "run", "--lib", LIB, "--record-only", "--trace-dir", traces, "--"] + job,
        "not shared": [CLSHIM, "run", "--lib", LIB, "--no-share-builds",
                       "--trace-dir", traces, "--"] + job,
        "shared": [CLSHIM, "run", "--lib", LIB, "--trace-dir", traces, "--"] + job,
    }[config]
    cpu0, t0 = children_cpu(), time.perf_counter()
    p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wall, cpu = time.perf_counter() - t0, children_cpu() - cpu0
    ok = [l for l in p.stdout.splitlines() if l.startswith("workload ")]
    if p.returncode != 0 or len(ok) != ranks or not all("result=ok" in l for l in ok):
        sys.exit(f"shared_builds: {config} at {ranks} ranks failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
    nan = float("nan")
    b = builds(traces) if os.path.isdir(traces) else (nan, 0, 0, 0.0, nan, nan, nan, nan)
    return (cpu, wall) + b


def main():
    global CLSHIM, LIB, NEW, MPIEXEC
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", "--kernels", type=int, default=4)
    ap.add_argument("-s", "--statements", type=int, default=300)
    ap.add_argument("--ranks", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--rank-own", type=int, nargs="+", default=None,
                    help="kernels of each rank's own (default: 0, N/2 and N)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "out", "shared-builds"))
    ap.add_argument("--python", default=NEW, metavar="PATH",
                    help="the Python that runs bench/workload.py (default: .venv/current/bin/python)")
    ap.add_argument("--mpiexec", default="mpiexec", metavar="WORDS",
                    help="the launcher and its options, split as a shell would; "
                         "'-n R' follows them (default: mpiexec)")
    ap.add_argument("--clshim-dir", default=os.path.dirname(CLSHIM), metavar="DIR",
                    help="the folder of clshim and libclshim.so (default: target/release)")
    a = ap.parse_args()
    CLSHIM = os.path.join(os.path.abspath(a.clshim_dir), "clshim")
    LIB = os.path.join(os.path.abspath(a.clshim_dir), "libclshim.so")
    NEW = a.python
    MPIEXEC = shlex.split(a.mpiexec)
    owns = a.rank_own if a.rank_own is not None else sorted({0, a.kernels // 2, a.kernels})
    shutil.rmtree(a.out, ignore_errors=True)
    cases = [(r, k) for k in owns for r in a.ranks if k == 0 or r > 1]
    rows = {(r, k, c): [] for r, k in cases for c in CONFIGS}
    for rep in range(a.repeat):
        for r, k in cases:
            work = ["-n", str(a.kernels), "-s", str(a.statements), "--rank-own", str(k)]
            # A different configuration first in each repeat: on this machine the last of
            # four jobs in a row was measured up to 1.16x the CPU of the same job first.
            for c in CONFIGS[rep % 4:] + CONFIGS[:rep % 4]:
                d = os.path.join(a.out, f"r{r}-own{k}-{c.replace(' ', '-')}-{rep}")
                rows[(r, k, c)].append(run(c, r, work, d))
                shutil.rmtree(d, ignore_errors=True)
    med = lambda xs, i: statistics.median(x[i] for x in xs)
    print(f"shared_builds: bench/workload.py -n {a.kernels} -s {a.statements}, per-rank cold caches, "
          f"median of {a.repeat} interleaved runs")
    print(f"{'ranks':>5} {'own':>3} {'configuration':14} {'job CPU s':>10} {'wall s':>8} "
          f"{'build CPU s':>12} {'launch CPU s':>13} {'compiled':>9} {'from peer':>10} {'from store':>11} "
          f"{'waited s':>9}")
    for r, k in cases:
        for c in CONFIGS:
            xs = rows[(r, k, c)]
            print(f"{r:>5} {k:>3} {c:14} {med(xs, 0):10.2f} {med(xs, 1):8.2f} {med(xs, 2):12.2f} "
                  f"{med(xs, 7):13.2f} {med(xs, 3):9.0f} {med(xs, 4):10.0f} {med(xs, 9):11.0f} "
                  f"{med(xs, 5):9.2f}")
    for r, k in cases:
        plain, rec = rows[(r, k, "no clshim")], rows[(r, k, "recorded")]
        shared, unshared = rows[(r, k, "shared")], rows[(r, k, "not shared")]
        comp = lambda xs: statistics.median(x[2] + x[7] for x in xs)
        print(f"{r} ranks, {k} own: repeats {100 * med(rec, 6):.0f}% of build CPU, "
              f"{100 * med(rec, 8):.0f}% of build + first launch CPU; "
              f"build + first launch CPU shared / recorded {comp(shared) / comp(rec):.2f}x; "
              f"shared / recorded build CPU {med(shared, 2) / med(rec, 2):.2f}x, "
              f"shared / not shared build CPU {med(shared, 2) / med(unshared, 2):.2f}x, "
              f"first launch CPU {med(shared, 7) / med(rec, 7):.2f}x of recorded; job CPU: "
              f"shared / no clshim {med(shared, 0) / med(plain, 0):.2f}x, "
              f"not shared / no clshim {med(unshared, 0) / med(plain, 0):.2f}x, "
              f"shared / not shared {med(shared, 0) / med(unshared, 0):.2f}x; "
              f"wall shared / no clshim {med(shared, 1) / med(plain, 1):.2f}x")


if __name__ == "__main__":
    main()
