#!/usr/bin/env python3
"""What the native store costs and what it saves, on an MPI job whose ranks each keep their
own caches (bench/workload.py --cache-root: each rank its own POCL_CACHE_DIR and
XDG_CACHE_HOME, as mirgecom's documentation advises), side by side in one run:

  plain          the cold job without clshim (pyopencl 2023.1 pays pocl's second compile
                 inline, in its binary query)
  substitute     the cold job under `clshim run --binaries substitute --no-warm-service`
                 (its ranks share and keep their compiles, and leave a request for each
                 clshim binary they hand out), then `clshim warm` in the foreground, which
                 makes those and promotes the kept compiles: the job's CPU plus all the
                 warm work it leads to
  warm starts    the job again on warm caches, without clshim and under `--binaries
                 substitute` with the store `clshim warm` filled (how many loads took the
                 driver's binary from the store is printed)

All of the cold job's warm work is done by the `clshim warm` this process waits for and
counts (`--no-warm-service` keeps the node's warm service, on by default, from starting:
its CPU RUSAGE_CHILDREN would miss, and its processes' wait at exit would be counted in the
job). What the service costs a job is bench/keep.py's to measure (it counts the CPU of the
whole process tree in a cgroup). Until 0.2 the cold job set CLSHIM_WARM=1 to leave its
requests, and a configuration timed `clshim run --warm`, the warm step after the job,
which 0.2 no longer has.

Prints CPU seconds (user + system of every process of the job, and of the warm step) and
wall seconds, the median over --repeat runs, and the ratios the issue asks for. CPU time is
what to compare on a loaded machine; wall time only when it is idle.

    bench/store_cost.sh                     # 2 ranks, 6 kernels x 150 statements, 3 repeats
    bench/store_cost.sh --ranks 2 -n 4 -s 100 --repeat 1
"""
import argparse
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CLSHIM = os.path.join(ROOT, "target", "release", "clshim")
LIB = os.path.join(ROOT, "target", "release", "libclshim.so")


def children_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def timed(cmd, env, cwd=None):
    """Runs cmd to its end; returns (cpu seconds of it and its descendants, wall seconds,
    stdout). Descendants that outlive it (the node's warm service) are not counted."""
    cpu0, t0 = children_cpu(), time.perf_counter()
    p = subprocess.run(cmd, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wall, cpu = time.perf_counter() - t0, children_cpu() - cpu0
    if p.returncode != 0:
        sys.exit(f"store_cost: {' '.join(cmd)} failed ({p.returncode}):\n{p.stderr}")
    return cpu, wall, p.stdout + p.stderr


def build_seconds(out):
    """The largest build_s of the ranks' workload lines."""
    vals = [float(v) for v in re.findall(r"build_s=([0-9.]+)", out)]
    return max(vals) if vals else float("nan")


def base_env(home):
    env = {k: v for k, v in os.environ.items() if not k.startswith("CLSHIM_") and k not in ("LD_PRELOAD", "OPENCL_LAYERS")}
    env["HOME"] = home
    return env


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("-n", "--kernels", type=int, default=6)
    ap.add_argument("-s", "--statements", type=int, default=150)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--python", default=os.path.join(ROOT, ".venv", "old", "bin", "python"))
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "out", "store-cost"))
    ap.add_argument("--build", metavar="DIR",
                    help="the folder holding the clshim and libclshim.so to measure (default: this "
                         "repository's target/release), e.g. an earlier version's, for a before/after "
                         "(0.2 or later: earlier versions left requests only under CLSHIM_WARM=1)")
    a = ap.parse_args()
    global CLSHIM, LIB
    if a.build:
        CLSHIM, LIB = os.path.join(a.build, "clshim"), os.path.join(a.build, "libclshim.so")
    job = ["mpiexec", "-n", str(a.ranks), a.python, os.path.join(ROOT, "bench", "workload.py"),
           "-n", str(a.kernels), "-s", str(a.statements)]
    rows = {k: [] for k in ("plain", "sub_job", "sub_warm", "warm_plain", "warm_store",
                            "warm_plain_build", "warm_store_build")}
    loads = []
    shutil.rmtree(a.out, ignore_errors=True)
    for r in range(a.repeat):
        d = os.path.join(a.out, f"r{r}")
        home = os.path.join(d, "home")
        os.makedirs(home)
        env = base_env(home)
        store = os.path.join(d, "store")
        # plain, cold then warm
        cpu, wall, _ = timed(job + ["--cache-root", os.path.join(d, "plain")], env)
        rows["plain"].append((cpu, wall))
        cpu, wall, out = timed(job + ["--cache-root", os.path.join(d, "plain")], env)
        rows["warm_plain"].append((cpu, wall))
        rows["warm_plain_build"].append(build_seconds(out))
        # substitute leaving its requests to clshim warm, then clshim warm in the foreground
        sub = [CLSHIM, "run", "--lib", LIB, "--binaries", "substitute", "--native-store", store, "--"]
        cold = sub[:-1] + ["--no-warm-service", "--"]
        # A temporary folder of the job's own, as a batch job gets one on its node: ranks
        # share compiles through it, and must not find another run's there.
        node = dict(env, TMPDIR=os.path.join(d, "tmp-cold"))
        os.makedirs(node["TMPDIR"])
        cpu_job, wall_job, _ = timed(cold + job + ["--cache-root", os.path.join(d, "sub")], node)
        cpu_warm, wall_warm, warm_out = timed([CLSHIM, "warm", "--lib", LIB, "--store", store], node)
        rows["sub_job"].append((cpu_job, wall_job))
        rows["sub_warm"].append((cpu_warm, wall_warm))
        traces = os.path.join(d, "traces-warm")
        sub_traced = sub[:2] + ["--trace-dir", traces] + sub[2:]
        later = dict(env, TMPDIR=os.path.join(d, "tmp-warm"))
        os.makedirs(later["TMPDIR"])
        cpu, wall, out = timed(sub_traced + job + ["--cache-root", os.path.join(d, "sub")], later)
        rows["warm_store"].append((cpu, wall))
        rows["warm_store_build"].append(build_seconds(out))
        text = "".join(open(os.path.join(traces, f)).read() for f in os.listdir(traces))
        loads.append((text.count('"made_from":"native"'), text.count('"event":"binary_load"')))
        print(f"repeat {r + 1}: {warm_out.strip().splitlines()[-1] if warm_out.strip() else ''}", file=sys.stderr)

    med = lambda k, i: statistics.median(x[i] for x in rows[k])
    print(f"store_cost: {a.ranks} ranks, {a.kernels} kernels x {a.statements} statements, "
          f"rank-local caches, pyopencl from {a.python}, median of {a.repeat}")
    print(f"{'':34} {'CPU s':>9} {'wall s':>9}")
    print(f"{'cold, no clshim':34} {med('plain', 0):9.2f} {med('plain', 1):9.2f}")
    print(f"{'cold, substitute, no service':34} {med('sub_job', 0):9.2f} {med('sub_job', 1):9.2f}   "
          f"{statistics.median(j[1] / p[1] for j, p in zip(rows['sub_job'], rows['plain'])):.2f}x the wall "
          "of no clshim")
    print(f"{'clshim warm (all its workers)':34} {med('sub_warm', 0):9.2f} {med('sub_warm', 1):9.2f}")
    total = [j[0] + w[0] for j, w in zip(rows["sub_job"], rows["sub_warm"])]
    ratio = statistics.median(t / p[0] for t, p in zip(total, rows["plain"]))
    print(f"{'substitute + clshim warm':34} {statistics.median(total):9.2f} {'':>9}   {ratio:.2f}x the CPU of no clshim")
    wb = statistics.median(s / p for s, p in zip(rows["warm_store_build"], rows["warm_plain_build"]))
    print(f"{'warm start, no clshim':34} {med('warm_plain', 0):9.2f} {med('warm_plain', 1):9.2f}   "
          f"build {statistics.median(rows['warm_plain_build']):.3f} s")
    print(f"{'warm start, substitute + store':34} {med('warm_store', 0):9.2f} {med('warm_store', 1):9.2f}   "
          f"build {statistics.median(rows['warm_store_build']):.3f} s ({wb:.2f}x)")
    print("warm loads from the store: " + ", ".join(f"{n} of {t}" for n, t in loads))


if __name__ == "__main__":
    main()
