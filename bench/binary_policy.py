#!/usr/bin/env python3
"""Benchmark of clshim's binary policy (issue 3) on pocl's CPU driver.

Runs bench/workload.py (pyopencl 2023.1, which still caches binaries on pocl) under
`mpiexec -n R` for each rank count R, every rank with its own cold caches
(bench/rank_env.sh), in these configurations:

  a        caching on, no shim
  b        PYOPENCL_NO_CACHE=1, no shim
  c        caching on, shim with CLSHIM_BINARIES=substitute
  d        caching on, shim with CLSHIM_BINARIES=suppress
  b-warm   b again on the same cache directories (pocl's kcache is warm)
  c-warm   c again on the same cache directories (pyopencl's cache hits; the shim
           turns its binary back into a source build, served by pocl's kcache)

and prints the wall-clock time of the whole mpiexec and the largest in-process build
time over the ranks (workload.py's build_s), then the ratios to (b). Results, logs and
clshim traces go to bench/out/ (git-ignored). Usually run through bench/binary_policy.sh,
which installs and builds what this needs first. Uses only the standard library.
"""
import argparse
import datetime
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = {
    "a": ("(a) cache on, no shim", {}, None),
    "b": ("(b) PYOPENCL_NO_CACHE=1, no shim", {"PYOPENCL_NO_CACHE": "1"}, None),
    "c": ("(c) cache on, shim substitute", {}, "substitute"),
    "d": ("(d) cache on, shim suppress", {}, "suppress"),
    "b-warm": ("(b) warm second run", {"PYOPENCL_NO_CACHE": "1"}, None),
    "c-warm": ("(c) warm second run", {}, "substitute"),
}
ORDER = ["a", "b", "b-warm", "c", "c-warm", "d"]
TABLE_ORDER = ["a", "b", "c", "d", "b-warm", "c-warm"]
LINE = re.compile(r"^workload rank=(\S+) .*build_s=([0-9.]+) first_run_s=([0-9.]+) total_s=([0-9.]+) result=(\S+)")


def csv_ints(s):
    return [int(x) for x in s.split(",") if x]


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--ranks", type=csv_ints, default=[1, 2, 4],
                    help="comma-separated rank counts (default 1,2,4)")
    ap.add_argument("-n", "--kernels", type=int, default=4, help="kernels per rank (default 4)")
    ap.add_argument("-s", "--statements", type=int, default=300,
                    help="statements per kernel (default 300)")
    ap.add_argument("--configs", default=",".join(ORDER),
                    help="comma-separated subset of " + ",".join(ORDER) + " (default all)")
    ap.add_argument("--python", default=str(ROOT / ".venv/old/bin/python"),
                    help="Python with pyopencl 2023.1 (default .venv/old/bin/python)")
    ap.add_argument("--shim", default=str(ROOT / "target/release/libclshim.so"),
                    help="libclshim.so (default target/release/libclshim.so)")
    ap.add_argument("--mpiexec", default=shutil.which("mpiexec.mpich") or "mpiexec",
                    help="MPI launcher (default mpiexec.mpich, else mpiexec)")
    ap.add_argument("--out", default=str(ROOT / "bench/out"), help="output folder (default bench/out)")
    ap.add_argument("--keep-caches", action="store_true",
                    help="keep the cache folders (they are deleted after the run by default)")
    args = ap.parse_args(argv)
    args.configs = [c for c in args.configs.split(",") if c]
    for c in args.configs:
        if c not in CONFIGS:
            ap.error(f"unknown config {c!r}; known: {', '.join(ORDER)}")
    for c in ("b", "c"):
        if f"{c}-warm" in args.configs and c not in args.configs:
            ap.error(f"{c}-warm needs {c} (it reuses {c}'s cache folders)")
    if not args.ranks or min(args.ranks) < 1:
        ap.error("--ranks needs positive rank counts")
    return args


def base_env():
    env = {k: v for k, v in os.environ.items()
           if not (k.startswith("CLSHIM_") or k in ("LD_PRELOAD", "OPENCL_LAYERS",
                                                      "PYOPENCL_NO_CACHE", "PYOPENCL_CTX"))}
    if "OCL_ICD_VENDORS" not in env and Path("/etc/OpenCL/vendors").is_dir():
        env["OCL_ICD_VENDORS"] = "/etc/OpenCL/vendors"
    return env


def run_one(args, run_dir, config, ranks):
    label, extra_env, policy = CONFIGS[config]
    cold = config.removesuffix("-warm")
    cache_root = run_dir / "caches" / f"{cold}_R{ranks}"
    env = base_env()
    env.update(extra_env)
    if policy:
        env["CLSHIM_BENCH_PRELOAD"] = str(Path(args.shim).resolve())
        env["CLSHIM_BINARIES"] = policy
        env["CLSHIM_TRACE_DIR"] = str(run_dir / "traces" / f"{config}_R{ranks}")
    cmd = [args.mpiexec, "-n", str(ranks), str(ROOT / "bench/rank_env.sh"), str(cache_root),
           args.python, str(ROOT / "bench/workload.py"),
           "--kernels", str(args.kernels), "--statements", str(args.statements)]
    t0 = time.monotonic()
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    wall = time.monotonic() - t0
    logs = run_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    (logs / f"{config}_R{ranks}.out").write_text(p.stdout)
    (logs / f"{config}_R{ranks}.err").write_text(p.stderr)
    lines = [m for m in map(LINE.match, p.stdout.splitlines()) if m]
    ok = p.returncode == 0 and len(lines) == ranks and all(m.group(5) == "ok" for m in lines)
    res = {
        "config": config, "label": label, "ranks": ranks, "ok": ok, "returncode": p.returncode,
        "wall_s": round(wall, 3),
        "build_max_s": max((float(m.group(2)) for m in lines), default=None),
        "first_run_max_s": max((float(m.group(3)) for m in lines), default=None),
        "total_max_s": max((float(m.group(4)) for m in lines), default=None),
        "stderr_lines": len(p.stderr.splitlines()),
    }
    status = "ok" if ok else f"FAILED (exit {p.returncode}, {len(lines)}/{ranks} ranks reported; see {logs}/{config}_R{ranks}.err)"
    print(f"  R={ranks} {label:34s} wall {wall:7.2f} s  build max {res['build_max_s'] or 0:7.3f} s  {status}",
          file=sys.stderr, flush=True)
    return res


def fmt(x, width=8, prec=2):
    return f"{x:{width}.{prec}f}" if isinstance(x, (int, float)) else f"{'-':>{width}}"


def table(args, results, info):
    R = args.ranks
    get = lambda c, r: results.get((c, r))
    out = []
    out.append(f"clshim binary-policy benchmark: {info}")
    out.append(f"workload: {args.kernels} kernels x {args.statements} statements per rank, "
               f"rank-local cold caches, {os.cpu_count()} cores")
    out.append("")
    head = f"{'':36s}" + "".join(f"{'wall R=' + str(r):>10s}" for r in R) + "   " + \
        "".join(f"{'build R=' + str(r):>11s}" for r in R)
    out.append(head)
    for c in TABLE_ORDER:
        if c not in args.configs:
            continue
        row = f"{CONFIGS[c][0]:36s}"
        for r in R:
            x = get(c, r)
            row += f"{(fmt(x['wall_s']) if x and x['ok'] else 'FAIL'):>10s}"
        row += "   "
        for r in R:
            x = get(c, r)
            row += f"{(fmt(x['build_max_s'], prec=3) if x and x['ok'] else 'FAIL'):>11s}"
        out.append(row)
    out.append("")
    out.append("seconds: wall = whole mpiexec; build = max over ranks of time in Program.build()")
    out.append("")
    out.append(f"{'ratios (wall / build)':36s}" + "".join(f"{'R=' + str(r):>17s}" for r in R))
    for num, den, label in (("a", "b", "(a)/(b)  cache on vs off"),
                            ("c", "b", "(c)/(b)  substitute vs off"),
                            ("d", "b", "(d)/(b)  suppress vs off"),
                            ("c-warm", "b-warm", "warm (c)/(b)")):
        if num not in args.configs or den not in args.configs:
            continue
        row = f"{label:36s}"
        for r in R:
            n, d = get(num, r), get(den, r)
            if n and d and n["ok"] and d["ok"] and d["wall_s"] > 0 and d["build_max_s"]:
                row += f"{n['wall_s'] / d['wall_s']:9.2f} / {n['build_max_s'] / d['build_max_s']:5.2f}"
            else:
                row += f"{'-':>17s}"
        out.append(row)
    return "\n".join(out)


def platform_info(args):
    code = ("import pyopencl as cl; p=[p for p in cl.get_platforms()]; "
            "print('pyopencl', cl.VERSION_TEXT, '|', '; '.join(x.version for x in p))")
    try:
        return subprocess.run([args.python, "-c", code], env=base_env(), capture_output=True,
                              text=True, timeout=60).stdout.strip()
    except Exception as e:  # informational only
        return f"(could not query: {e})"


def main(argv=None):
    args = parse_args(argv)
    if not Path(args.python).exists():
        sys.exit(f"{args.python} is missing: run bench/binary_policy.sh (or scripts/demo) to create it")
    if not shutil.which(args.mpiexec):
        sys.exit(f"{args.mpiexec} not found: install Debian's mpich")
    if any(CONFIGS[c][2] for c in args.configs) and not Path(args.shim).exists():
        sys.exit(f"{args.shim} is missing: run `cargo build --release` (or bench/binary_policy.sh)")
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    out = Path(args.out)
    run_dir = out / f"binary_policy-{stamp}"
    run_dir.mkdir(parents=True, exist_ok=True)
    info = platform_info(args)
    print(f"benchmark: {info}; output in {run_dir}", file=sys.stderr, flush=True)

    results = {}
    for r in args.ranks:
        for c in ORDER:
            if c in args.configs:
                results[(c, r)] = run_one(args, run_dir, c, r)
    if not args.keep_caches:
        shutil.rmtree(run_dir / "caches", ignore_errors=True)

    text = table(args, results, info)
    print()
    print(text)
    (run_dir / "table.txt").write_text(text + "\n")
    (run_dir / "results.json").write_text(json.dumps({
        "info": info, "kernels": args.kernels, "statements": args.statements,
        "ranks": args.ranks, "cores": os.cpu_count(), "configs": args.configs,
        "results": list(results.values()),
    }, indent=1) + "\n")
    shutil.copyfile(run_dir / "table.txt", out / "latest.txt")
    print(f"\n(written to {run_dir}/table.txt, results.json, logs/, traces/)")
    return 0 if all(x["ok"] for x in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
