#!/usr/bin/env python3
"""What the native store costs and what it saves, on an MPI job whose ranks each keep their
own caches (bench/workload.py --cache-root: each rank its own POCL_CACHE_DIR and
XDG_CACHE_HOME, as mirgecom's documentation advises), side by side in one run:

  plain          the cold job without clshim (pyopencl 2023.1 pays pocl's second compile
                 inline, in its binary query)
  substitute     the cold job under `clshim run --binaries substitute` leaving requests
                 (CLSHIM_WARM=1), then `clshim warm` in the foreground: the job's CPU plus
                 all the warm work it leads to
  run --warm     the same cold job under `clshim run --warm`, which runs the warm step in
                 the foreground once the job ends (inside the job's time, on every CPU):
                 its wall time against `clshim run` without it
  warm starts    the job again on warm caches, without clshim and with the store

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
    stdout). Descendants that outlive it (a background warm step) are not counted."""
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


def wait_background(store, timeout=1800):
    """Waits until the store holds no request and no warm step runs on it (a warm step of
    a version that left it in the background)."""
    req = os.path.join(store, "requests")
    until = time.time() + timeout
    while time.time() < until:
        waiting = [f for f in os.listdir(req) if f.endswith(".req")] if os.path.isdir(req) else []
        busy = subprocess.run(["pgrep", "-f", f"clshim warm --store {store}"], stdout=subprocess.PIPE).returncode == 0
        if not waiting and not busy:
            return
        time.sleep(0.2)
    sys.exit("store_cost: the background warm step did not finish")


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
                         "repository's target/release), e.g. an earlier version's, for a before/after")
    a = ap.parse_args()
    global CLSHIM, LIB
    if a.build:
        CLSHIM, LIB = os.path.join(a.build, "clshim"), os.path.join(a.build, "libclshim.so")
    job = ["mpiexec", "-n", str(a.ranks), a.python, os.path.join(ROOT, "bench", "workload.py"),
           "-n", str(a.kernels), "-s", str(a.statements)]
    rows = {k: [] for k in ("plain", "sub_job", "sub_warm", "run", "run_warm", "warm_plain", "warm_store",
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
        # substitute leaving requests, then the warm step in the foreground
        sub = [CLSHIM, "run", "--lib", LIB, "--binaries", "substitute", "--native-store", store, "--"]
        cpu_job, wall_job, _ = timed(sub + job + ["--cache-root", os.path.join(d, "sub")], dict(env, CLSHIM_WARM="1"))
        cpu_warm, wall_warm, warm_out = timed([CLSHIM, "warm", "--lib", LIB, "--store", store], env)
        rows["sub_job"].append((cpu_job, wall_job))
        rows["sub_warm"].append((cpu_warm, wall_warm))
        traces = os.path.join(d, "traces-warm")
        sub_traced = sub[:2] + ["--trace-dir", traces] + sub[2:]
        cpu, wall, out = timed(sub_traced + job + ["--cache-root", os.path.join(d, "sub")], env)
        rows["warm_store"].append((cpu, wall))
        rows["warm_store_build"].append(build_seconds(out))
        text = "".join(open(os.path.join(traces, f)).read() for f in os.listdir(traces))
        loads.append((text.count('"made_from":"native"'), text.count('"event":"binary_load"')))
        # clshim run with and without --warm, cold, each on its own caches and store
        s2 = os.path.join(d, "store-run")
        run = [CLSHIM, "run", "--lib", LIB, "--binaries", "substitute", "--native-store", s2, "--"]
        _, wall, _ = timed(run + job + ["--cache-root", os.path.join(d, "run")], env)
        rows["run"].append((0, wall))
        s3 = os.path.join(d, "store-run-warm")
        runw = [CLSHIM, "run", "--lib", LIB, "--warm", "--binaries", "substitute", "--native-store", s3, "--"]
        _, wall, _ = timed(runw + job + ["--cache-root", os.path.join(d, "runw")], env)
        rows["run_warm"].append((0, wall))
        wait_background(s3)
        print(f"repeat {r + 1}: {warm_out.strip().splitlines()[-1] if warm_out.strip() else ''}", file=sys.stderr)

    med = lambda k, i: statistics.median(x[i] for x in rows[k])
    print(f"store_cost: {a.ranks} ranks, {a.kernels} kernels x {a.statements} statements, "
          f"rank-local caches, pyopencl from {a.python}, median of {a.repeat}")
    print(f"{'':34} {'CPU s':>9} {'wall s':>9}")
    print(f"{'cold, no clshim':34} {med('plain', 0):9.2f} {med('plain', 1):9.2f}")
    print(f"{'cold, substitute (the job)':34} {med('sub_job', 0):9.2f} {med('sub_job', 1):9.2f}")
    print(f"{'clshim warm (all its workers)':34} {med('sub_warm', 0):9.2f} {med('sub_warm', 1):9.2f}")
    total = [j[0] + w[0] for j, w in zip(rows["sub_job"], rows["sub_warm"])]
    ratio = statistics.median(t / p[0] for t, p in zip(total, rows["plain"]))
    print(f"{'substitute + warm step':34} {statistics.median(total):9.2f} {'':>9}   {ratio:.2f}x the CPU of no clshim")
    rw = statistics.median(w[1] / r[1] for w, r in zip(rows["run_warm"], rows["run"]))
    print(f"{'clshim run (cold)':34} {'':>9} {med('run', 1):9.2f}")
    print(f"{'clshim run --warm (cold)':34} {'':>9} {med('run_warm', 1):9.2f}   {rw:.2f}x the wall of clshim run")
    wb = statistics.median(s / p for s, p in zip(rows["warm_store_build"], rows["warm_plain_build"]))
    print(f"{'warm start, no clshim':34} {med('warm_plain', 0):9.2f} {med('warm_plain', 1):9.2f}   "
          f"build {statistics.median(rows['warm_plain_build']):.3f} s")
    print(f"{'warm start, substitute + store':34} {med('warm_store', 0):9.2f} {med('warm_store', 1):9.2f}   "
          f"build {statistics.median(rows['warm_store_build']):.3f} s ({wb:.2f}x)")
    print("warm loads from the store: " + ", ".join(f"{n} of {t}" for n, t in loads))


if __name__ == "__main__":
    main()
