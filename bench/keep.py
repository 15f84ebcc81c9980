#!/usr/bin/env python3
"""What a job keeps as it runs, and what that costs and pays, side by side in one run
(issue 36). Every configuration runs on its own fresh temporary folder, pocl caches (one
per rank, as MPI sites advise) and store, unless it says it reuses one; the configurations
take turns at going first. CPU is the whole process tree's, anything of clshim's included
(a cgroup per run, v1's cpuacct or a v2 group, read once its last process has gone,
which also times how long anything of clshim's outlived the command).

  program cache      bench/workload.py (current pyopencl: no binary cache) under mpiexec
                     -n RANKS: no clshim, against `clshim run` (its defaults: keep, share,
                     serve) on a fresh store (the first job), and against the next job on a
                     fresh node (new temporary folder and caches, the same store)
  4 ranks            the same first job at 4 ranks
  substitute         pyopencl 2023.1 (which asks for binaries) on 2 ranks: its cold run and
                     two warm reruns (the same caches), without clshim and under
                     `clshim run --binaries substitute` (where a core is idle, the node's
                     warm service makes the driver's binaries of what the cold run handed
                     out, and each rank waits for its own at its exit; where none is, the
                     driver answers the query, as without clshim)
  nothing repeated   one rank, every kernel distinct and new: `clshim run` against none

    bench/keep.sh                    # 3 interleaved repeats
    bench/keep.sh --repeat 5
    python3 bench/keep.py --only program-cache --ranks 16 --mpiexec "mpiexec --oversubscribe"

Where no cgroup can be made, CPU is this process's children's, which leaves out
the node's warm service (a rank starts it, and it may end after the rank that started it).
"""
import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import time

from timing import timed

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CLSHIM = os.path.join(ROOT, "target", "release", "clshim")
LIB = os.path.join(ROOT, "target", "release", "libclshim.so")
NEW = os.path.join(ROOT, ".venv", "current", "bin", "python")
OLD = os.path.join(ROOT, ".venv", "old", "bin", "python")
WORKLOAD = os.path.join(ROOT, "bench", "workload.py")
CGROUP = "/sys/fs/cgroup/cpuacct"
CGROUP2 = "/sys/fs/cgroup"


def cgroup(tag):
    """A fresh cgroup for one run: (its folder, the file its processes are listed in, a
    function reading its CPU seconds), or None where none can be made. cgroup v1's cpuacct,
    else a cgroup v2 group (whose `cpu.stat` counts CPU without any controller enabled)."""
    name = f"clshim-bench-{os.getpid()}-{tag}"
    try:
        if os.path.isdir(CGROUP):
            group = os.path.join(CGROUP, name)
            os.makedirs(group, exist_ok=True)
            with open(os.path.join(group, "cpuacct.usage"), "w") as f:
                f.write("0")
            return group, "tasks", lambda: int(
                open(os.path.join(group, "cpuacct.usage")).read()) / 1e9
        if os.path.exists(os.path.join(CGROUP2, "cgroup.controllers")):
            group = os.path.join(CGROUP2, name)
            os.makedirs(group, exist_ok=True)

            def usage():
                for line in open(os.path.join(group, "cpu.stat")):
                    if line.startswith("usage_usec "):
                        return int(line.split()[1]) / 1e6
                return 0.0
            return group, "cgroup.procs", usage
    except OSError:
        return None
    return None


def measured(cmd, env, tag):
    """(CPU seconds of the whole tree, wall seconds until the command returned, seconds
    until its last process had gone, stdout, stderr) of `cmd`, run in a cgroup of its own."""
    made = cgroup(tag)
    if made is None:
        cpu, wall, p = timed(cmd, env)
        check(p, cmd)
        return cpu, wall, wall, p.stdout, p.stderr
    group, procs, usage = made
    shell = "echo $$ > {}/{} && exec \"$@\"".format(group, procs)
    t0 = time.perf_counter()
    p = subprocess.run(["sh", "-c", shell, "sh"] + cmd, env=env, text=True,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    wall = time.perf_counter() - t0
    while open(os.path.join(group, procs)).read().strip():
        time.sleep(0.01)
    gone = time.perf_counter() - t0
    cpu = usage()
    os.rmdir(group)
    check(p, cmd)
    return cpu, wall, gone, p.stdout, p.stderr


def check(p, cmd):
    ok = [l for l in p.stdout.splitlines() if l.startswith("workload ")]
    if p.returncode != 0 or not ok or not all("result=ok" in l for l in ok):
        sys.exit(f"keep: {' '.join(cmd)} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")


def fresh(d):
    """A fresh home and temporary folder below `d`, and the environment for them."""
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(os.path.join(d, "home"))
    os.makedirs(os.path.join(d, "tmp"))
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("CLSHIM_") and k not in ("LD_PRELOAD", "OPENCL_LAYERS")}
    env["HOME"] = os.path.join(d, "home")
    env["TMPDIR"] = os.path.join(d, "tmp")
    return env


MPIEXEC = ["mpiexec"]


def workload(py, ranks, n, s, caches):
    return MPIEXEC + ["-n", str(ranks), py, WORKLOAD, "-n", str(n), "-s", str(s),
                      "--cache-root", caches]


def under(extra, cmd):
    return [CLSHIM, "run", "--lib", LIB] + extra + ["--"] + cmd


def counts(stderr, word):
    """How many builds, first launches or loads the exit lines say came from `word`."""
    return sum(int(m) for line in stderr.splitlines() if line.startswith("clshim: ")
               for m in re.findall(r"(\d+) " + re.escape(word), line))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "out", "keep"))
    ap.add_argument("--ranks", type=int, nargs="+", default=[2, 4],
                    help="the program cache's jobs (the first of them also runs the next job)")
    ap.add_argument("--only", choices=["program-cache", "substitute", "nothing-repeated"],
                    default=None, help="only these runs (default: all)")
    ap.add_argument("--python", default=None, metavar="PATH",
                    help="the current pyopencl's Python (default .venv/current)")
    ap.add_argument("--old-python", default=None, metavar="PATH",
                    help="the Python of a pyopencl before 2024.2.3, which asks for binaries "
                         "(default .venv/old)")
    ap.add_argument("--substitute-ranks", type=int, default=2, metavar="N",
                    help="the substitute runs' ranks (default 2)")
    ap.add_argument("--mpiexec", default="mpiexec", metavar="WORDS")
    ap.add_argument("--clshim-dir", default=None, metavar="DIR",
                    help="where clshim and libclshim.so are (default target/release)")
    a = ap.parse_args()
    global NEW, OLD, CLSHIM, LIB
    MPIEXEC[:] = a.mpiexec.split()
    NEW = a.python or NEW
    OLD = a.old_python or OLD
    if a.clshim_dir:
        CLSHIM = os.path.join(a.clshim_dir, "clshim")
        LIB = os.path.join(a.clshim_dir, "libclshim.so")
    rows = {}

    def add(name, value):
        rows.setdefault(name, []).append(value)

    for rep in range(a.repeat):
        base = os.path.join(a.out, str(rep))

        def program_cache(ranks, tag):
            env = fresh(os.path.join(base, f"plain{ranks}"))
            plain = measured(workload(NEW, ranks, 4, 300, os.path.join(base, f"plain{ranks}", "c")),
                             env, f"plain{ranks}")
            env = fresh(os.path.join(base, f"first{ranks}"))
            first = measured(under([], workload(NEW, ranks, 4, 300,
                                                os.path.join(base, f"first{ranks}", "c"))),
                             env, f"first{ranks}")
            add(f"{tag} no clshim", plain)
            add(f"{tag} first job", first)
            if ranks == a.ranks[0]:
                # The next job: the first job's store, a fresh node (temporary folder, caches).
                env = dict(env, TMPDIR=os.path.join(base, "next-tmp"))
                shutil.rmtree(env["TMPDIR"], ignore_errors=True)
                shutil.rmtree(os.path.join(base, "next-c"), ignore_errors=True)
                os.makedirs(env["TMPDIR"])
                nxt = measured(under([], workload(NEW, ranks, 4, 300,
                                                  os.path.join(base, "next-c"))), env, "next")
                add(f"{tag} next job", nxt)
                served = counts(nxt[4], "from the store")
                add("next job taken from the store", (served, 0, 0, "", ""))
                add("next job builds and first launches", (8 * ranks, 0, 0, "", ""))

        def substitute():
            rows["substitute ranks"] = [(a.substitute_ranks, 0, 0, "", "")]
            for who in ("plain", "clshim"):
                env = fresh(os.path.join(base, f"sub-{who}"))
                caches = os.path.join(base, f"sub-{who}", "c")
                cmd = workload(OLD, a.substitute_ranks, 4, 300, caches)
                if who == "clshim":
                    cmd = under(["--binaries", "substitute"], cmd)
                for run in ("cold", "warm 1", "warm 2"):
                    r = measured(cmd, env, f"sub-{who}-{run.replace(' ', '')}")
                    add(f"substitute {who} {run}", r)
                    with open(os.path.join(base, f"sub-{who}", f"{run.replace(' ', '')}.err"),
                              "w") as f:
                        f.write(r[4])
                    if who == "clshim" and run == "cold":
                        add("substitute cold queries by the driver",
                            (counts(r[4], "answered by the driver"), 0, 0, "", ""))
                        add("substitute cold queries substituted",
                            (counts(r[4], "substituted"), 0, 0, "", ""))
                    if who == "clshim" and run != "cold":
                        # The driver's binaries: from the store (for clshim binaries), or
                        # the application's own (where the driver answered its queries).
                        native = (counts(r[4], "from the driver's binaries in the native store")
                                  + counts(r[4], "the driver's own"))
                        add(f"substitute {run} loads native", (native, 0, 0, "", ""))

        def nothing_repeated():
            for who in ("plain", "clshim"):
                env = fresh(os.path.join(base, f"once-{who}"))
                cmd = workload(NEW, 1, 4, 300, os.path.join(base, f"once-{who}", "c"))
                if who == "clshim":
                    cmd = under([], cmd)
                add(f"nothing repeated {who}", measured(cmd, env, f"once-{who}"))

        turns = [(lambda r=r: program_cache(r, f"{r} ranks")) for r in a.ranks]
        turns += [substitute, nothing_repeated]
        if a.only is not None:
            turns = {"program-cache": turns[:-2], "substitute": [substitute],
                     "nothing-repeated": [nothing_repeated]}[a.only]
        k = rep % len(turns)
        for f in turns[k:] + turns[:k]:
            f()

    med = lambda name, i: statistics.median(r[i] for r in rows[name])
    ratio = lambda num, den, i: statistics.median(
        x[i] / y[i] for x, y in zip(rows[num], rows[den]))
    print(f"keep: median of {a.repeat} interleaved repeats; CPU of the whole process tree")
    print(f"{'configuration':34} {'CPU s':>7} {'wall s':>7} {'gone s':>7}")
    for name, vals in rows.items():
        if isinstance(vals[0][1], (int, float)) and vals[0][3] != "":
            print(f"{name:34} {med(name, 0):7.2f} {med(name, 1):7.2f} {med(name, 2):7.2f}")
    print()
    r0 = a.ranks[0]
    if f"{r0} ranks first job" in rows:
        for r in a.ranks:
            print(f"first job, {r} ranks: CPU {ratio(f'{r} ranks first job', f'{r} ranks no clshim', 0):.2f}x, "
                  f"wall {ratio(f'{r} ranks first job', f'{r} ranks no clshim', 1):.2f}x of no clshim "
                  "(goals: at 2 ranks at most 0.9x and 1.0x; at 4, CPU at most 0.45x)")
        print(f"next job on a fresh node, {r0} ranks: CPU "
              f"{ratio(f'{r0} ranks next job', f'{r0} ranks no clshim', 0):.2f}x, wall "
              f"{ratio(f'{r0} ranks next job', f'{r0} ranks no clshim', 1):.2f}x "
              f"(goal: at most 0.1x CPU); builds and first launches taken from the store: "
              f"{med('next job taken from the store', 0):.0f} of "
              f"{med('next job builds and first launches', 0):.0f}")
    if "substitute clshim cold" in rows:
        print_substitute(rows, med, ratio)
    if "nothing repeated clshim" in rows:
        print(f"nothing repeated: CPU {ratio('nothing repeated clshim', 'nothing repeated plain', 0):.2f}x, "
              f"wall {ratio('nothing repeated clshim', 'nothing repeated plain', 1):.2f}x "
              "(goal: at most 1.02x)")
    gone = max(r[2] - r[1] for n, v in rows.items() for r in v if isinstance(r[1], float))
    print(f"the longest anything of clshim's outlived its command: {gone:.2f} s")


def print_substitute(rows, med, ratio):
    pair = [statistics.median(
        (c[0] + w[0]) / (pc[0] + pw[0]) for c, w, pc, pw in zip(
            rows["substitute clshim cold"], rows["substitute clshim warm 1"],
            rows["substitute plain cold"], rows["substitute plain warm 1"]))]
    print(f"substitute: cold + first warm rerun CPU {pair[0]:.2f}x (goal: at most 1.05x); "
          f"cold wall {ratio('substitute clshim cold', 'substitute plain cold', 1):.2f}x "
          f"(goal: at most 1.05x)")
    print(f"substitute cold run's binary queries: "
          f"{med('substitute cold queries substituted', 0):.0f} substituted, "
          f"{med('substitute cold queries by the driver', 0):.0f} answered by the driver "
          f"(no core idle; medians)")
    for run in ("warm 1", "warm 2"):
        print(f"substitute {run} rerun: CPU "
              f"{ratio(f'substitute clshim {run}', f'substitute plain {run}', 0):.2f}x, wall "
              f"{ratio(f'substitute clshim {run}', f'substitute plain {run}', 1):.2f}x (goal: at "
              f"most 1.05x), loads native: {med(f'substitute {run} loads native', 0):.0f} of "
              f"{4 * rows['substitute ranks'][0][0]}")


if __name__ == "__main__":
    main()
