#!/usr/bin/env python3
"""Tiny pyopencl kernels whose variants differ the ways tests/why.rs checks.

Builds three programs through `cl.Program(ctx, src).build(options)` (pyopencl's binary
cache, where the release has one) and runs each once on the first device:

  scale      `x[i] *= SIZE` with SIZE baked into the text: `--size-by-rank` makes it
             64 * (rank + 1), a numeric literal that differs between ranks
  offset     built with `-DOFFSET=<n>`: `--options-by-rank` makes n the rank
  shift      `--changed` adds a line to its text (a change between runs)

The rank comes from PMI_RANK (mpich's launcher), else 0. Prints `ok` on success.
"""
import argparse
import os
import sys

import numpy as np
import pyopencl as cl

ap = argparse.ArgumentParser()
ap.add_argument("--size-by-rank", action="store_true")
ap.add_argument("--options-by-rank", action="store_true")
ap.add_argument("--changed", action="store_true")
a = ap.parse_args()
rank = int(os.environ.get("PMI_RANK", "0"))

ctx = cl.Context([cl.get_platforms()[0].get_devices()[0]])
q = cl.CommandQueue(ctx)
n = 256
x = np.arange(n, dtype=np.float32)
buf = cl.Buffer(ctx, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR, hostbuf=x)

size = 64 * (rank + 1) if a.size_by_rank else 64
scale = f"""
kernel void scale(global float *x)
{{
    int i = get_global_id(0);
    x[i] = x[i] * {size};
}}
"""
offset = """
kernel void offset(global float *x)
{
    int i = get_global_id(0);
    x[i] = x[i] + OFFSET;
}
"""
shift = """
kernel void shift(global float *x)
{
    int i = get_global_id(0);
""" + ("    x[i] = x[i] - 1.0f;\n" if a.changed else "") + """    x[i] = x[i] + 1.0f;
}
"""
off = rank if a.options_by_rank else 0
expect = x.copy()
for src, opts, name in ((scale, "", "scale"), (offset, f"-DOFFSET={off}", "offset"),
                        (shift, "", "shift")):
    prg = cl.Program(ctx, src).build(options=opts)
    getattr(prg, name)(q, (n,), None, buf)
expect = expect * size + off + (0.0 if a.changed else 1.0)
out = np.empty_like(x)
cl.enqueue_copy(q, out, buf)
q.finish()
if not np.allclose(out, expect):
    print("wrong result", out[:4], expect[:4])
    sys.exit(1)
print("ok")
