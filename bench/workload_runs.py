"""What the benchmarks that run bench/workload.py share (bench/binary_policy.py,
bench/ranks_split.py): the workload's output line, the environment a run starts from
(no clshim variable, no preload, pyopencl's cache on, pocl's ICD found), the median, and
a one-line description of pyopencl and the OpenCL platforms. Standard library only."""
import os
import re
import subprocess
from pathlib import Path

# Found anywhere in the output, not per line: the launcher can join two ranks' lines.
LINE = re.compile(r"workload rank=(\S+) .*?build_s=([0-9.]+) first_run_s=([0-9.]+) total_s=([0-9.]+) result=(ok|WRONG)")


def csv_ints(s):
    return [int(x) for x in s.split(",") if x]


def base_env(extra=None):
    """This process's environment without clshim's variables, a preload or pyopencl's
    cache switches, with pocl's ICD folder named when the system has one, and `extra`."""
    env = {k: v for k, v in os.environ.items()
           if not (k.startswith("CLSHIM_") or k in ("LD_PRELOAD", "OPENCL_LAYERS",
                                                      "PYOPENCL_NO_CACHE", "PYOPENCL_CTX"))}
    if "OCL_ICD_VENDORS" not in env and Path("/etc/OpenCL/vendors").is_dir():
        env["OCL_ICD_VENDORS"] = "/etc/OpenCL/vendors"
    env.update(extra or {})
    return env


def median(xs):
    """The median, or None for no values."""
    xs = sorted(xs)
    n = len(xs)
    return None if n == 0 else xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2


def platform_info(python, env):
    """`pyopencl <version> | <each platform's version>`, as `python` sees them."""
    code = ("import pyopencl as cl; p=[p for p in cl.get_platforms()]; "
            "print('pyopencl', cl.VERSION_TEXT, '|', '; '.join(x.version for x in p))")
    try:
        return subprocess.run([python, "-c", code], env=env, capture_output=True,
                              text=True, timeout=60).stdout.strip()
    except Exception as e:  # informational only
        return f"(could not query: {e})"
