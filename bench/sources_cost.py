#!/usr/bin/env python3
"""What keeping sources (`clshim run --sources`) costs, two ways, printed as Markdown.

1. The demo workload side by side: bench/workload.py (pyopencl 2023.1, --kernels K
   --statements S) under `mpiexec -n R` and `clshim run --record-only` (what recording
   costs, without 0.2's program cache keeping compiles in the user's store), with
   rank-local cold caches,
   PAIRS times without and with --sources, alternating. Compares the workload's own
   build_s (Program.build(), which holds the keeping), the median over runs of the
   ranks' mean. On a shared machine the noise of this comparison is larger than the cost.
2. The keeping itself, without a compiler to hide it: tests/c/why_writer.c on the fake
   driver (builds cost nothing) making N programs of TEXT bytes each, without and with
   sources, REPEAT times alternating; the difference per program is what keeping one
   distinct source and one options string costs, set against the demo's build time per
   program from part 1.

   usage: .venv/old/bin/python bench/sources_cost.py [--pairs 3] [--ranks 2] [-n 4] [-s 300]
Needs target/release/clshim and libclshim.so (cargo build --release), mpiexec, cc,
.venv/old (scripts/test makes it) and pocl.
"""
import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CLSHIM = os.path.join(ROOT, "target/release/clshim")
PY = os.path.join(ROOT, ".venv/old/bin/python")

ap = argparse.ArgumentParser()
ap.add_argument("--pairs", type=int, default=3)
ap.add_argument("--ranks", type=int, default=2)
ap.add_argument("-n", "--kernels", type=int, default=4)
ap.add_argument("-s", "--statements", type=int, default=300)
ap.add_argument("--programs", type=int, default=500, help="fake-driver programs (part 2)")
ap.add_argument("--text", type=int, default=20000, help="bytes per fake-driver text")
ap.add_argument("--repeat", type=int, default=5)
a = ap.parse_args()

env = {k: v for k, v in os.environ.items()
       if not k.startswith("CLSHIM_") and k not in ("LD_PRELOAD", "OPENCL_LAYERS",
                                                   "PYOPENCL_NO_CACHE")}
work = tempfile.mkdtemp(prefix="clshim-sources-cost.")


def demo(mode, i):
    d = os.path.join(work, f"{mode}-{i}")
    cmd = [CLSHIM, "run", "--record-only", "--no-summary", "--trace-dir", os.path.join(d, "t")]
    if mode == "with":
        cmd.append("--sources")
    cmd += ["--", "mpiexec", "-n", str(a.ranks), PY, os.path.join(ROOT, "bench/workload.py"),
            "--cache-root", os.path.join(d, "c"), "-n", str(a.kernels), "-s", str(a.statements)]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout
    builds = [float(x) for x in re.findall(r"build_s=([0-9.]+)", out)]
    assert len(builds) == a.ranks and "result=wrong" not in out, out
    kept = os.path.join(d, "t", "sources")
    files = os.listdir(kept) if os.path.isdir(kept) else []
    size = sum(os.path.getsize(os.path.join(kept, f)) for f in files)
    return statistics.mean(builds), len(files), size


res = {"without": [], "with": []}
kept = (0, 0)
for i in range(a.pairs):
    for mode in ("without", "with"):
        b, n, size = demo(mode, i)
        res[mode].append(b)
        if mode == "with":
            kept = (n, size)
med = {m: statistics.median(v) for m, v in res.items()}

# Part 2: the writer on the fake driver.
fake = os.path.join(work, "fake")
os.makedirs(os.path.join(fake, "vendors"))
lib = os.path.join(fake, "libfakeicd.so")
subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-fvisibility=hidden", "-o", lib,
                os.path.join(ROOT, "tests/fake_icd/fake_icd.c"), "-lpthread"], check=True)
with open(os.path.join(fake, "vendors", "fake.icd"), "w") as f:
    f.write(lib + "\n")
writer = os.path.join(fake, "why_writer")
subprocess.run(["cc", "-O2", "-DCL_TARGET_OPENCL_VERSION=300", "-o", writer,
                os.path.join(ROOT, "tests/c/why_writer.c"), "-lOpenCL"], check=True)
times = {"without": [], "with": []}
for r in range(a.repeat):
    for mode in ("without", "with"):
        t = os.path.join(work, f"w-{mode}-{r}")
        e = dict(env, OCL_ICD_VENDORS=os.path.join(fake, "vendors"), CLSHIM_TRACE_DIR=t,
                 CLSHIM_SUMMARY="0", LD_PRELOAD=os.path.join(ROOT, "target/release/libclshim.so"))
        if mode == "with":
            e["CLSHIM_TRACE_SOURCES"] = "1"
        t0 = time.perf_counter()
        subprocess.run([writer, "0", str(a.programs), str(a.text)], env=e, check=True,
                       capture_output=True)
        times[mode].append(time.perf_counter() - t0)
per = (statistics.median(times["with"]) - statistics.median(times["without"])) / a.programs
demo_per_program = med["without"] / a.kernels

load = open("/proc/loadavg").read().split()[:3]
print(f"## Keeping sources: cost\n")
print(f"{os.cpu_count()} cores, load {' '.join(load)}; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}\n")
print(f"**Demo workload** (pyopencl 2023.1, {a.ranks} ranks, {a.kernels} kernels x "
      f"{a.statements} statements, cold rank-local caches), build_s per rank (mean over "
      f"ranks), {a.pairs} alternating pairs:\n")
print("| run | without --sources | with --sources |\n|---|---|---|")
for i in range(a.pairs):
    print(f"| {i + 1} | {res['without'][i]:.3f} s | {res['with'][i]:.3f} s |")
diff = 100 * (med["with"] - med["without"]) / med["without"]
print(f"| median | {med['without']:.3f} s | {med['with']:.3f} s ({diff:+.1f}%) |\n")
print(f"With --sources each run kept {kept[0]} files, {kept[1]} bytes.\n")
print(f"**The keeping itself** (fake driver, {a.programs} programs of {a.text} bytes, each "
      f"with its own options, median of {a.repeat}): without {statistics.median(times['without']):.3f} s, "
      f"with {statistics.median(times['with']):.3f} s: {1e6 * per:.0f} us per program kept, "
      f"{100 * per / demo_per_program:.3f}% of the demo's build time per program "
      f"({demo_per_program:.3f} s).")
shutil.rmtree(work, ignore_errors=True)
