#!/usr/bin/env python3
"""A small pyopencl program for the integration tests (tests/clients/pyopencl.rs).

Builds --kernels distinct kernels named <--name>_<k>, each of --statements statements,
through `cl.Program(ctx, src).build()` (pyopencl's binary cache, where the release has
one), runs each once on pocl's CPU device and checks the result with numpy. Prints one
line `RESULT <json>` on stdout:

  ok            every result correct
  pyopencl      pyopencl's version
  kernels       the kernel names
  cache_hits    pyopencl's "binary cache hit" debug messages (its cache served a build)
  cache_misses  pyopencl's "binary cache miss" debug messages
  cache_binaries  sizes of the binary files in pyopencl's cache folder after the run

pyopencl's own log messages are captured, not printed, so stderr shows only warnings.
Exits 1 on a wrong result.
"""
import argparse
import glob
import json
import logging
import os
import sys

import numpy as np
import pyopencl as cl


class Collect(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


def pocl_context():
    for p in cl.get_platforms():
        if p.name == "Portable Computing Language":
            return cl.Context(p.get_devices()[:1])
    raise SystemExit("no pocl platform")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--name", default="clshim_test")
    ap.add_argument("--kernels", type=int, default=1)
    ap.add_argument("--statements", type=int, default=3)
    args = ap.parse_args()

    collect = Collect()
    pyo_log = logging.getLogger("pyopencl")
    pyo_log.setLevel(logging.DEBUG)
    pyo_log.addHandler(collect)
    pyo_log.propagate = False

    ctx = pocl_context()
    queue = cl.CommandQueue(ctx)
    n = 1000
    a = np.arange(n, dtype=np.float32)
    b = np.full(n, 0.5, dtype=np.float32)
    mf = cl.mem_flags
    a_buf = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=a)
    b_buf = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=b)
    c_buf = cl.Buffer(ctx, mf.WRITE_ONLY, a.nbytes)

    names, ok = [], True
    for k in range(args.kernels):
        name = f"{args.name}_{k}"
        body = "  c[i] = a[i] + b[i];\n" * (args.statements - 1)
        src = (f"__kernel void {name}(__global const float *a, __global const float *b,"
               f" __global float *c)\n{{\n  int i = get_global_id(0);\n{body}"
               f"  c[i] = a[i] + b[i] + {k}.0f;\n}}\n")
        prg = cl.Program(ctx, src).build()
        getattr(prg, name)(queue, (n,), None, a_buf, b_buf, c_buf)
        c = np.empty_like(a)
        cl.enqueue_copy(queue, c, c_buf)
        queue.finish()
        names.append(name)
        if not np.array_equal(c, a + b + np.float32(k)):
            ok = False

    xdg = os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache"))
    binaries = sorted(os.path.getsize(p) for p in
                      glob.glob(os.path.join(xdg, "pyopencl", "*", "*", "binary")))
    print("RESULT " + json.dumps({
        "ok": ok,
        "pyopencl": cl.VERSION_TEXT,
        "kernels": names,
        "cache_hits": sum(m.startswith("build program: binary cache hit") for m in collect.messages),
        "cache_misses": sum(m.startswith("build program: binary cache miss") for m in collect.messages),
        "cache_binaries": binaries,
    }), flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
