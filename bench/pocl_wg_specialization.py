"""What POCL_WORK_GROUP_SPECIALIZATION=0 changes on pocl's CPU driver: the first launch
of each kernel at two global sizes, and the kernels' speed afterwards. The report's
first-launch hint is worded from these figures.

    for v in 1 0 1 0; do POCL_KERNEL_CACHE=0 POCL_WORK_GROUP_SPECIALIZATION=$v \
        .venv/current/bin/python bench/pocl_wg_specialization.py; done

Prints, per setting: the sum over NK kernels of the first launch (enqueue + finish) at
global size 4096, then at 1000 (another size, so another work-group size when pyopencl
lets pocl choose), the second launch at 4096, then the first launch and the best of 5
runs at 2^16 work items.
"""
import os, time
import numpy as np
import pyopencl as cl

NK, NS = 3, 150


def src(i):
    body = "\n".join(
        f"  acc = acc * 1.0001f + sin(acc + {j}.0f) * {i + 1}.0f;" for j in range(NS))
    return (f"__kernel void k{i}(__global float *a) {{\n"
            f"  size_t g = get_global_id(0); float acc = a[g];\n{body}\n  a[g] = acc; }}")


ctx = cl.Context(devices=[cl.get_platforms()[0].get_devices()[0]])
q = cl.CommandQueue(ctx)
prg = cl.Program(ctx, "\n".join(src(i) for i in range(NK))).build()
buf = cl.Buffer(ctx, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR,
                hostbuf=np.ones(1 << 16, np.float32))


def launch(k, g):
    t = time.perf_counter()
    k(q, (g,), None, buf)
    q.finish()
    return time.perf_counter() - t


res = dict.fromkeys(["first@4096", "first@1000", "second@4096", "first@2^16", "run@2^16"], 0.0)
for i in range(NK):
    k = getattr(prg, f"k{i}")
    res["first@4096"] += launch(k, 4096)
    res["first@1000"] += launch(k, 1000)
    res["second@4096"] += launch(k, 4096)
    res["first@2^16"] += launch(k, 1 << 16)
    res["run@2^16"] += min(launch(k, 1 << 16) for _ in range(5))
print("POCL_WORK_GROUP_SPECIALIZATION=%s " % os.environ.get("POCL_WORK_GROUP_SPECIALIZATION", "unset")
      + " ".join(f"{k}={v:.3f}" for k, v in res.items()))
