#!/usr/bin/env python3
"""The program cache against what pyopencl users have today, side by side in one run, on
bench/workload.py (N kernels of S statements, one process, pocl's CPU device):

  2026, no clshim        current pyopencl, which keeps no binaries on pocl: every start builds
                         every program from source, served by pocl's kernel cache when warm
  2026, program cache    the same under `clshim run` (its defaults: the program cache on),
                         after one cold run, which kept its compiles in the store, and
                         `clshim warm`, which made the driver's binary of each kept compile
                         (promotion): every build is served as the driver's binary
  2023.1, own cache      pyopencl 2023.1 loading pocl's binaries from its own binary cache

Warm starts: `build_s` (the time in Program.build() for all kernels) and the run's CPU,
each configuration run --repeat times, interleaved, median, and how many of the program
cache's builds were served as the driver's binary. Cold starts: pyopencl 2026 without
clshim against the program cache's cold run (which keeps its compiles), each on fresh
caches and a fresh store, interleaved, median of CPU and wall; and the CPU of the
`clshim warm` that follows, run by hand as a user would (optional since 0.2: without it a
later build takes the kept compile at the speed of pocl's own kernel cache). Results must be
right in every run (the workload checks them with numpy).

Until 0.2 the cold run set CLSHIM_WARM=1 to leave requests for `clshim warm`; since, every
job keeps its compiles and `clshim warm` turns those without the driver's binary into
requests itself, so the same binaries are made.

    bench/program_cache.sh                      # 8 kernels x 100 statements, 5 repeats
    bench/program_cache.sh -n 4 -s 100 --repeat 3
"""
import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys

from timing import children_cpu, timed

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CLSHIM = os.path.join(ROOT, "target", "release", "clshim")
LIB = os.path.join(ROOT, "target", "release", "libclshim.so")
NEW = os.path.join(ROOT, ".venv", "current", "bin", "python")
OLD = os.path.join(ROOT, ".venv", "old", "bin", "python")
WORKLOAD = os.path.join(ROOT, "bench", "workload.py")



def run(cmd, env):
    """(CPU seconds, wall seconds, build_s, builds, builds served as the driver's binary) of
    one run to its end; the last two from clshim's exit line (0 without clshim)."""
    cpu, wall, p = timed(cmd, env)
    line = next((l for l in p.stdout.splitlines() if l.startswith("workload ")), "")
    if p.returncode != 0 or "result=ok" not in line:
        sys.exit(f"program_cache: {' '.join(cmd)} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
    build = float(re.search(r"build_s=([0-9.]+)", line).group(1))
    exits = [l for l in p.stderr.splitlines() if l.startswith("clshim: ")]
    builds = sum(int(m) for l in exits for m in re.findall(r"(\d+) builds ", l))
    native = sum(int(m) for l in exits for m in re.findall(r"\((\d+) as the driver's binary\)", l))
    return cpu, wall, build, builds, native


def env_for(home):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("CLSHIM_") and k not in ("LD_PRELOAD", "OPENCL_LAYERS")}
    env["HOME"] = home
    # A temporary folder of its own, as a new job gets: ranks share compiles through the
    # temporary folder (CLSHIM_SHARE_BUILDS), and a run must not find another's there.
    env["TMPDIR"] = os.path.join(os.path.dirname(home), "tmp")
    os.makedirs(env["TMPDIR"], exist_ok=True)
    return env


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", "--kernels", type=int, default=8)
    ap.add_argument("-s", "--statements", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "out", "program-cache"))
    a = ap.parse_args()
    shutil.rmtree(a.out, ignore_errors=True)
    os.makedirs(a.out)
    work = ["-n", str(a.kernels), "-s", str(a.statements)]
    cache = [CLSHIM, "run", "--lib", LIB, "--"]

    # Cold starts, interleaved, each on fresh caches and store; the cache's cold run keeps
    # its compiles, and the CPU of the clshim warm that makes their driver's binaries is
    # measured after it.
    cold = {"plain": [], "cache": [], "warm_step": []}
    for r in range(a.repeat):
        d = os.path.join(a.out, f"cold{r}")
        for name in ("plain", "cache"):
            home = os.path.join(d, name, "home")
            os.makedirs(home)
            env = env_for(home)
            roots = ["--cache-root", os.path.join(d, name, "caches")]
            if name == "plain":
                cold[name].append(run([NEW, WORKLOAD] + work + roots, env)[:3])
            else:
                cold[name].append(run(cache + [NEW, WORKLOAD] + work + roots, env)[:3])
                cpu0 = children_cpu()
                subprocess.run([CLSHIM, "warm", "--lib", LIB], env=env, check=True,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                cold["warm_step"].append(children_cpu() - cpu0)

    # Warm starts: one setup each (a cold run; for the cache, then clshim warm), then the
    # three configurations interleaved.
    home = os.path.join(a.out, "warm", "home")
    os.makedirs(home)
    env = env_for(home)
    roots = {k: ["--cache-root", os.path.join(a.out, "warm", k)] for k in ("plain", "cache", "old")}
    run([NEW, WORKLOAD] + work + roots["plain"], env)
    run(cache + [NEW, WORKLOAD] + work + roots["cache"], env)
    subprocess.run([CLSHIM, "warm", "--lib", LIB], env=env, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    run([OLD, WORKLOAD] + work + roots["old"], env)
    warm = {"plain": [], "cache": [], "old": []}
    for r in range(a.repeat):
        warm["plain"].append(run([NEW, WORKLOAD] + work + roots["plain"], env))
        warm["cache"].append(run(cache + [NEW, WORKLOAD] + work + roots["cache"], env))
        warm["old"].append(run([OLD, WORKLOAD] + work + roots["old"], env))

    med = lambda rows, i: statistics.median(x[i] for x in rows)
    pair = lambda num, den, i: statistics.median(n[i] / d[i] for n, d in zip(num, den))
    print(f"program_cache: bench/workload.py -n {a.kernels} -s {a.statements}, one process, "
          f"median of {a.repeat} interleaved runs")
    print(f"{'warm start':30} {'build_s':>9} {'CPU s':>8} {'wall s':>8}")
    for k, label in (("plain", "2026, no clshim"), ("cache", "2026, program cache"), ("old", "2023.1, own cache")):
        print(f"{label:30} {med(warm[k], 2):9.4f} {med(warm[k], 0):8.3f} {med(warm[k], 1):8.3f}")
    print("program cache's warm starts, builds served as the driver's binary: "
          + ", ".join(f"{x[4]} of {x[3]}" for x in warm["cache"]))
    print(f"build_s, program cache / 2023.1 own cache: {pair(warm['cache'], warm['old'], 2):.2f}x (goal: at most 1.3x)")
    print(f"build_s, program cache / 2026 no clshim:   {pair(warm['cache'], warm['plain'], 2):.2f}x (goal: at most 0.3x)")
    print(f"{'cold start':30} {'build_s':>9} {'CPU s':>8} {'wall s':>8}")
    for k, label in (("plain", "2026, no clshim"), ("cache", "2026, program cache")):
        print(f"{label:30} {med(cold[k], 2):9.4f} {med(cold[k], 0):8.3f} {med(cold[k], 1):8.3f}")
    print(f"cold, program cache / no clshim: CPU {pair(cold['cache'], cold['plain'], 0):.3f}x, "
          f"wall {pair(cold['cache'], cold['plain'], 1):.3f}x (goal: at most 1.02x)")
    print(f"clshim warm after a cold run: {statistics.median(cold['warm_step']):.3f} CPU s "
          f"({statistics.median(w / c[0] for w, c in zip(cold['warm_step'], cold['plain'])):.2f}x the cold run's CPU), "
          f"off the application's path, once")


if __name__ == "__main__":
    main()
