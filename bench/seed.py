#!/usr/bin/env python3
"""The seed's kind of workload (issue 37): grudge's examples/wave/wave-op-mpi.py --lazy
--no-diagnostics (pytato's distributed execution over MPI, pymetis partitioning), stopped
after WAVE_STEPS (5) time steps, every rank on cold pocl and pyopencl caches of its own (a
wrapper like the README's rank-caches.sh). Three jobs, each on a fresh temporary folder
and caches: no clshim; `clshim run` (its defaults) on a fresh store; the next job on the
same store. It prints each job's wall and CPU (this process's children's) and, from
`clshim report --json` of the first job, the compiles against the distinct programs.

    bench/seed.sh --ranks 16                     # makes .venv/seed (network) the first time
    python3 bench/seed.py --python python3 --clshim-dir .gpu --ranks 16 \
        --mpiexec "mpiexec --allow-run-as-root --oversubscribe --bind-to none"

The example is fetched from grudge at the commit below and changed only in its time loop
(bench/out/seed/wave.py), so this repository carries none of grudge's code. The versions
are those with which 16 ranks run: PyPI's loopy 2025.2 fails at 12 and 16 ranks
(`KeyError: 'nodes0_2d_dim1'`, a part with no elements), loopy's main at 94a3a3f does not.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import urllib.request

from timing import timed

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GRUDGE = "58f97baae256f7d622c53b8fc176bc3fce41704d"
EXAMPLE = (f"https://raw.githubusercontent.com/inducer/grudge/{GRUDGE}/"
           "examples/wave/wave-op-mpi.py")
PACKAGES = [
    "numpy", "mpi4py", "pyopencl==2026.1.4", "pytools==2026.1.1", "islpy==2026.2.2",
    "pymetis==2025.2.2", "pymbolic==2025.1", "modepy==2026.1",
    "loopy @ git+https://github.com/inducer/loopy@94a3a3f9d50adbc11325ce467eced1b731297c35",
    "pytato @ git+https://github.com/inducer/pytato@70d844be4f02622080ee4ec353b7e0633764568c",
    "arraycontext @ git+https://github.com/inducer/arraycontext@d74503b818508ee7d8b762014c8914d7b2c00c7a",
    "meshmode @ git+https://github.com/inducer/meshmode@92a938711639cdb3a3887087d546860824ad1f90",
    f"grudge @ git+https://github.com/inducer/grudge@{GRUDGE}",
]
RANK_CACHES = """#!/bin/sh
r=${OMPI_COMM_WORLD_RANK:-${PMI_RANK:-${PMIX_RANK:-0}}}
export POCL_CACHE_DIR="$CACHE_ROOT/pocl-$r" XDG_CACHE_HOME="$CACHE_ROOT/xdg-$r"
exec "$@"
"""


def example(out, given):
    """grudge's example (`given`, or fetched at GRUDGE), its time loop stopped after
    WAVE_STEPS steps."""
    path = os.path.join(out, "wave.py")
    if given or not os.path.exists(path):
        if given:
            with open(given) as f:
                text = f.read()
        else:
            text = urllib.request.urlopen(EXAMPLE, timeout=60).read().decode()
        loop = "    while t < t_final:\n"
        if loop not in text:
            sys.exit(f"seed: {EXAMPLE} has no line {loop!r}")
        text = text.replace(loop, "    while t < t_final and istep < int(__import__('os')"
                                  ".environ.get('WAVE_STEPS', '5')):\n")
        with open(path, "w") as f:
            f.write(text)
    wrapper = os.path.join(out, "rank-caches.sh")
    with open(wrapper, "w") as f:
        f.write(RANK_CACHES)
    os.chmod(wrapper, 0o755)
    return path, wrapper


def venv():
    py = os.path.join(ROOT, ".venv", "seed", "bin", "python")
    if not os.path.exists(py):
        subprocess.run([sys.executable, "-m", "venv", os.path.dirname(os.path.dirname(py))],
                       check=True)
        subprocess.run([py, "-m", "pip", "install", "-q"] + PACKAGES, check=True)
    return py


def run(cmd, env):
    cpu, wall, p = timed(cmd, env)
    if p.returncode != 0:
        sys.exit(f"seed: {' '.join(cmd)} failed ({p.returncode}):\n{p.stderr[-4000:]}")
    return cpu, wall, p


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--python", default=None, metavar="PATH",
                    help="a Python with the packages above (default: .venv/seed, made here)")
    ap.add_argument("--mpiexec", default="mpiexec", metavar="WORDS")
    ap.add_argument("--clshim-dir", default=os.path.join(ROOT, "target", "release"),
                    metavar="DIR")
    ap.add_argument("--example", default=None, metavar="PATH",
                    help="grudge's examples/wave/wave-op-mpi.py at the commit above, where "
                         "GitHub cannot be reached")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "out", "seed"))
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    wave, wrapper = example(a.out, a.example)
    py = a.python or venv()
    clshim = [os.path.join(a.clshim_dir, "clshim"), "run", "--lib",
              os.path.join(a.clshim_dir, "libclshim.so")]
    job = a.mpiexec.split() + ["-n", str(a.ranks), wrapper, py, "-m", "mpi4py", wave,
                               "--lazy", "--no-diagnostics"]
    home = os.path.join(a.out, "home")
    shutil.rmtree(home, ignore_errors=True)
    rows = {}
    for tag in ("plain", "first", "next"):
        d = os.path.join(a.out, tag)
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(os.path.join(d, "tmp"))
        env = {k: v for k, v in os.environ.items()
               if not k.startswith("CLSHIM_") and k not in ("LD_PRELOAD", "OPENCL_LAYERS")}
        env.update(HOME=os.path.join(d, "home") if tag == "plain" else home,
                   TMPDIR=os.path.join(d, "tmp"), CACHE_ROOT=os.path.join(d, "c"),
                   WAVE_STEPS=str(a.steps), PYTHONUNBUFFERED="1")
        traces = os.path.join(d, "traces")
        cmd = job if tag == "plain" else clshim + ["--trace-dir", traces, "--"] + job
        cpu, wall, _ = run(cmd, env)
        rows[tag] = (cpu, wall)
        print(f"{tag:6} ranks {a.ranks}: CPU {cpu:8.2f} s, wall {wall:7.2f} s", flush=True)
        if tag != "plain":
            rep = json.loads(subprocess.run(clshim[:1] + ["report", "--json", traces], env=env,
                                            check=True, text=True,
                                            stdout=subprocess.PIPE).stdout)
            b = rep["program_cache_builds"]
            programs = rep["repeats"]["programs"]
            print(f"       builds {rep['repeats']['builds']}: compiled {b['compiled']} "
                  f"({b['compiled_after_waiting']} after waiting) for {programs} distinct "
                  f"programs = {b['compiled'] / programs:.3f}x; from a peer {b['from_peer']}, "
                  f"the store {b['from_store']}, pocl's own cache {b['own_cache']}", flush=True)
    for tag in ("first", "next"):
        print(f"{tag} against no clshim: CPU {rows[tag][0] / rows['plain'][0]:.2f}x, "
              f"wall {rows[tag][1] / rows['plain'][1]:.2f}x")


if __name__ == "__main__":
    main()
