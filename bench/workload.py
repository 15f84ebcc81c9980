#!/usr/bin/env python3
"""A pyopencl workload that pays for pocl's binary queries: N distinct kernels of S statements each, built through
pyopencl's ``Program(ctx, src).build()`` (which goes through pyopencl's binary cache in
releases before 2024.2.3), each run once on pocl's CPU driver and checked with numpy.

Prints one line per process, for people and for bench/binary_policy.py to parse:

    workload rank=0 pid=123 pyopencl=2023.1 device=... kernels=4 statements=300 \
        build_s=1.234 first_run_s=0.456 total_s=1.690 result=ok

``build_s`` is the time spent in ``Program.build()`` for all kernels (with pyopencl's
binary cache this includes the CL_PROGRAM_BINARIES query, where pocl compiles a second
time); ``first_run_s`` is the time of the first enqueue + wait of every kernel (pocl
compiles the size-specialised kernel there unless its kcache has it).

``--cache-root DIR`` gives each rank its own cold caches, as on a cluster whose ranks start
on fresh nodes, without a wrapper script between the launcher and Python: pocl's kcache
(``POCL_CACHE_DIR``) and pyopencl's binary cache (under ``XDG_CACHE_HOME``) become
DIR/pocl_rank<r> and DIR/xdg_rank<r>. pocl reads its variable when the first OpenCL call
finds its platform and pyopencl its own at the first build, so setting them here (after
the import, before any OpenCL call) is early enough.
Exits 1 when a result is wrong, 2 when no OpenCL device can be had.
"""
import argparse
import os
import sys
import time

import numpy as np
import pyopencl as cl

POCL_PLATFORM = "Portable Computing Language"


def rank_label():
    for var in ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PALS_RANKID", "SLURM_PROCID"):
        if os.environ.get(var, "").isdigit():
            return os.environ[var]
    return "-"


def kernel_source(k, statements, value=None):
    """Kernel k: `statements` copies of one statement, then one that adds `value` (default
    k), which makes the kernel's result (and its source text) distinct from every other's."""
    value = k if value is None else value
    body = "  c[gid] = a[gid] + b[gid];\n" * max(statements - 1, 0)
    return (
        f"__kernel void sum_{k}(__global const float *a, __global const float *b,\n"
        f"                      __global float *c)\n"
        "{\n"
        "  int gid = get_global_id(0);\n"
        f"{body}"
        f"  c[gid] = a[gid] + b[gid] + {value}.0f;\n"
        "}\n"
    )


def pick_context():
    """A context on pocl's CPU device when there is one, else pyopencl's default choice."""
    for platform in cl.get_platforms():
        if platform.name == POCL_PLATFORM:
            devs = platform.get_devices(device_type=cl.device_type.CPU) or platform.get_devices()
            if devs:
                return cl.Context(devs[:1])
    return cl.create_some_context(interactive=False)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", "--kernels", type=int, default=4, help="number of kernels (default 4)")
    ap.add_argument("-s", "--statements", type=int, default=300,
                    help="statements per kernel (default 300)")
    ap.add_argument("--elements", type=int, default=50000, help="array length (default 50000)")
    ap.add_argument("--rank-own", type=int, default=0, metavar="K",
                    help="the first K kernels differ from rank to rank (their constant is offset by "
                         "1000 x rank), so ranks share only the others (default 0: all shared); "
                         "first, so that each rank's first compile, which also pays for the "
                         "compiler's start in the process, is one of its own")
    ap.add_argument("--cache-root", metavar="DIR",
                    help="rank-local caches: DIR/pocl_rank<r> and DIR/xdg_rank<r>")
    args = ap.parse_args(argv)
    if args.kernels < 1 or args.statements < 1 or args.elements < 1:
        ap.error("--kernels, --statements and --elements must be at least 1")
    if args.cache_root:
        r = rank_label() if rank_label() != "-" else "0"
        root = os.path.abspath(args.cache_root)
        os.environ["POCL_CACHE_DIR"] = os.path.join(root, f"pocl_rank{r}")
        os.environ["XDG_CACHE_HOME"] = os.path.join(root, f"xdg_rank{r}")

    try:
        ctx = pick_context()
    except cl.Error as e:
        print(f"workload: no OpenCL device: {e}", file=sys.stderr)
        return 2
    queue = cl.CommandQueue(ctx)
    dev = ctx.devices[0]

    rng = np.random.default_rng(1234)
    a = rng.random(args.elements, dtype=np.float32)
    b = rng.random(args.elements, dtype=np.float32)
    mf = cl.mem_flags
    a_buf = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=a)
    b_buf = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=b)
    c_buf = cl.Buffer(ctx, mf.WRITE_ONLY, a.nbytes)

    t_start = time.perf_counter()
    build_s = 0.0
    run_s = 0.0
    bad = []
    own = max(0, min(args.rank_own, args.kernels))
    rank = int(rank_label()) if rank_label() != "-" else 0
    for k in range(args.kernels):
        # The kernel's name stays sum_<k>; only its constant (and so its result) is the rank's own.
        value = k + 1000 * rank if k < own else k
        t0 = time.perf_counter()
        prg = cl.Program(ctx, kernel_source(k, args.statements, value)).build()
        t1 = time.perf_counter()
        knl = getattr(prg, f"sum_{k}")
        knl(queue, a.shape, None, a_buf, b_buf, c_buf)
        c = np.empty_like(a)
        cl.enqueue_copy(queue, c, c_buf)
        queue.finish()
        t2 = time.perf_counter()
        build_s += t1 - t0
        run_s += t2 - t1
        if not np.allclose(c, a + b + np.float32(value)):
            bad.append(k)
    total_s = time.perf_counter() - t_start

    line = (
        f"workload rank={rank_label()} pid={os.getpid()} pyopencl={cl.VERSION_TEXT}"
        f" device={dev.name.replace(' ', '_')} kernels={args.kernels}"
        f" statements={args.statements} build_s={build_s:.3f} first_run_s={run_s:.3f}"
        f" total_s={total_s:.3f} result={'ok' if not bad else 'WRONG'}\n"
    )
    # One write for the whole line, so ranks sharing the launcher's output never split it.
    sys.stdout.flush()
    os.write(1, line.encode())
    if bad:
        print(f"workload: wrong results from kernels {bad}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
