#!/usr/bin/env python3
"""What the same job costs while the host's other CPUs are busy: the yardstick for every
CPU ratio of a design that works beside the job (the node's warm service makes the
driver's binaries on the cores a job leaves idle, while it runs).

The job (bench/workload.py under mpiexec, fresh temporary folder and caches per run) is
bound to the first CPUS CPUs of this process's affinity, and runs alone, then with one
spinning process (nice 19) bound to each of the other CPUs; the two take turns at going
first. Its CPU is its whole process tree's (a cgroup per run, as bench/keep.py counts it;
the spinners are not in it). The job's work is the same both times: where its CPU-seconds
grow, the host's cores slow each other down (a shared last-level cache and memory
bandwidth, a lower clock with more cores busy, or a hypervisor's), and any design whose
work runs beside the job's pays that on the job's CPU as well as its own.

    python3 bench/busy_neighbours.py --ranks 2 --cpus 4 --repeat 6
    python3 bench/busy_neighbours.py --ranks 1 --cpus 1       # a 2-core machine
"""
import argparse
import os
import statistics
import subprocess
import sys
import time

import keep

SPIN = "while True:\n    pass\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--cpus", type=int, default=None,
                    help="CPUs the job is bound to (default: half of this process's, at least 1)")
    ap.add_argument("--repeat", type=int, default=4)
    ap.add_argument("--python", default=keep.NEW, metavar="PATH",
                    help="the pyopencl's Python (default .venv/current)")
    ap.add_argument("--mpiexec", default="mpiexec", metavar="WORDS")
    ap.add_argument("--out", default=os.path.join(keep.ROOT, "bench", "out", "busy_neighbours"))
    a = ap.parse_args()
    keep.MPIEXEC = a.mpiexec.split()
    mine = sorted(os.sched_getaffinity(0))
    k = a.cpus or max(1, len(mine) // 2)
    if k >= len(mine):
        sys.exit(f"busy_neighbours: {len(mine)} CPUs here: bind the job to fewer (--cpus)")
    job, others = mine[:k], mine[k:]
    bind = ["taskset", "-c", ",".join(map(str, job))]
    rows = {"alone": [], "busy": []}
    for rep in range(a.repeat):
        for how in (("alone", "busy") if rep % 2 == 0 else ("busy", "alone")):
            d = os.path.join(a.out, f"{rep}-{how}")
            env = keep.fresh(d)
            cmd = bind + keep.workload(a.python, a.ranks, 4, 300, os.path.join(d, "c"))
            spinners = []
            if how == "busy":
                spinners = [subprocess.Popen(["taskset", "-c", str(c), "nice", "-n", "19",
                                              sys.executable, "-c", SPIN]) for c in others]
                time.sleep(1)
            try:
                r = keep.measured(cmd, env, f"nb-{rep}-{how}")
            finally:
                for p in spinners:
                    p.kill()
                    p.wait()
            rows[how].append(r)
            print(f"{how:5} {rep}: CPU {r[0]:6.2f} s, wall {r[1]:6.2f} s", flush=True)
    ratio = lambda i: statistics.median(b[i] / s[i] for b, s in zip(rows["busy"], rows["alone"]))
    print(f"busy_neighbours: {a.ranks} ranks bound to CPUs {bind[2]}, the other {len(others)} "
          f"busy against idle, median of {a.repeat}: CPU {ratio(0):.2f}x, wall {ratio(1):.2f}x")


if __name__ == "__main__":
    main()
