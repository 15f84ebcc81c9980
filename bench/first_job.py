#!/usr/bin/env python3
"""The program cache's first job and what it pays back, side by side in one run: an MPI job
of bench/workload.py (current pyopencl, which keeps no binaries on pocl; N kernels of S
statements, the same programs on every rank, each rank on its own cold caches, as MPI sites
advise), each configuration on fresh caches and a fresh native store, interleaved:

  no clshim        the cold job as users run it
  first job        `clshim run --program-cache --warm -- mpiexec ...`: the job, then the
                   warm step in the foreground (its CPU counted: all the warm work the job
                   leads to), with ranks of the node sharing their compiles (the default)
  first, unshared  the same with --no-share-builds
  next job         `clshim run --program-cache -- mpiexec ...` on fresh caches (a new node)
                   with the store the first job filled: its builds served

CPU is this process's children's (user + system of every process of the job, the warm step
included); the first job's extra CPU over no clshim, divided by what each next job saves,
is how many jobs it takes to pay back. Results must be right in every run.

    bench/first_job.sh                       # 2 ranks, 4 kernels x 300 statements, 3 repeats
    bench/first_job.sh --ranks 2 -n 8 -s 100 --repeat 5
"""
import argparse
import os
import shutil
import statistics
import sys

from timing import timed

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CLSHIM = os.path.join(ROOT, "target", "release", "clshim")
LIB = os.path.join(ROOT, "target", "release", "libclshim.so")
NEW = os.path.join(ROOT, ".venv", "current", "bin", "python")
WORKLOAD = os.path.join(ROOT, "bench", "workload.py")

CONFIGS = ("no clshim", "first job", "first, unshared", "next job")



def run(cmd, env, ranks):
    cpu, wall, p = timed(cmd, env)
    ok = [l for l in p.stdout.splitlines() if l.startswith("workload ")]
    if p.returncode != 0 or len(ok) != ranks or not all("result=ok" in l for l in ok):
        sys.exit(f"first_job: {' '.join(cmd)} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
    return cpu, wall, p.stderr


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", "--kernels", type=int, default=4)
    ap.add_argument("-s", "--statements", type=int, default=300)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "out", "first-job"))
    a = ap.parse_args()
    shutil.rmtree(a.out, ignore_errors=True)
    rows = {c: [] for c in CONFIGS}
    served_lines = []
    for rep in range(a.repeat):
        d = os.path.join(a.out, str(rep))
        envs = {}
        for c in ("no clshim", "first job", "first, unshared"):
            home = os.path.join(d, c.replace(" ", "-").replace(",", ""), "home")
            os.makedirs(home)
            env = {k: v for k, v in os.environ.items()
                   if not k.startswith("CLSHIM_") and k not in ("LD_PRELOAD", "OPENCL_LAYERS")}
            env["HOME"] = home
            env["TMPDIR"] = os.path.join(os.path.dirname(home), "tmp")
            os.makedirs(env["TMPDIR"])
            envs[c] = env
        job = lambda caches: ["mpiexec", "-n", str(a.ranks), NEW, WORKLOAD, "-n", str(a.kernels),
                              "-s", str(a.statements), "--cache-root", caches]
        base = os.path.dirname
        plain = lambda: rows["no clshim"].append(run(
            job(os.path.join(base(envs["no clshim"]["HOME"]), "caches")), envs["no clshim"], a.ranks)[:2])
        first = lambda: rows["first job"].append(run(
            [CLSHIM, "run", "--lib", LIB, "--program-cache", "--warm", "--"]
            + job(os.path.join(base(envs["first job"]["HOME"]), "caches")), envs["first job"], a.ranks)[:2])
        unshared = lambda: rows["first, unshared"].append(run(
            [CLSHIM, "run", "--lib", LIB, "--program-cache", "--no-share-builds", "--warm", "--"]
            + job(os.path.join(base(envs["first, unshared"]["HOME"]), "caches")),
            envs["first, unshared"], a.ranks)[:2])
        # Each takes its turn at going first: a run's place in a series was measured to
        # change its CPU (bench/shared_builds.py).
        turns = [plain, first, unshared]
        for f in turns[rep % 3:] + turns[:rep % 3]:
            f()
        # The next job: the first job's store, fresh caches and a fresh temporary folder.
        env = dict(envs["first job"], TMPDIR=os.path.join(d, "next-tmp"))
        os.makedirs(env["TMPDIR"])
        cpu, wall, err = run([CLSHIM, "run", "--lib", LIB, "--program-cache", "--"]
                             + job(os.path.join(d, "next-caches")), env, a.ranks)
        rows["next job"].append((cpu, wall))
        served_lines += [l.split("; ")[-1] for l in err.splitlines() if "served from the native store" in l]
    med = lambda c, i: statistics.median(x[i] for x in rows[c])
    pair = lambda c, i: statistics.median(x[i] / p[i] for x, p in zip(rows[c], rows["no clshim"]))
    print(f"first_job: bench/workload.py -n {a.kernels} -s {a.statements} under mpiexec -n {a.ranks}, "
          f"per-rank cold caches, median of {a.repeat} interleaved runs")
    print(f"{'configuration':18} {'CPU s':>8} {'wall s':>8} {'CPU ratio':>10} {'wall ratio':>11}")
    for c in CONFIGS:
        print(f"{c:18} {med(c, 0):8.2f} {med(c, 1):8.2f} {pair(c, 0):9.2f}x {pair(c, 1):10.2f}x   "
              f"runs' CPU: {' '.join(f'{x[0]:.2f}' for x in rows[c])}")
    extra = med("first job", 0) - med("no clshim", 0)
    saved = med("no clshim", 0) - med("next job", 0)
    if extra <= 0:
        print("first job with its warm work: no extra CPU over no clshim (paid back at once)")
    else:
        print(f"first job's extra CPU {extra:.2f} s; each next job on fresh caches saves {saved:.2f} s: "
              f"paid back after {extra / saved:.1f} jobs" if saved > 0 else "next jobs save nothing")
    print("next jobs' exit lines: " + (served_lines[0] if served_lines else "(none)"))


if __name__ == "__main__":
    main()
