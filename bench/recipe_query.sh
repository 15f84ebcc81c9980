#!/usr/bin/env bash
# What a binary query costs a compile+link client (bench/compile_link_query.c: compile a
# kernel and a helper, link, query CL_PROGRAM_BINARY_SIZES/BINARIES, load the binary back,
# build, run) under `pass` (pocl answers: its second, generic compile) and `substitute`
# (clshim answers with the program's recipe), side by side in one run, each with a cold
# pocl kernel cache and a fresh kernel source. Prints a Markdown table: compile+link time,
# binary-query time and their ratio, the load (recompile + relink) time, and the wall time.
#
#   bench/recipe_query.sh [OUT.md]     (default: stdout)
#   STMTS=300 REPEATS=2
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib.sh"
cd "$CLSHIM_ROOT"
out="${1:-/dev/stdout}"
stmts="${STMTS:-300}"
repeats="${REPEATS:-2}"
cargo build --release -q
shim="$PWD/target/release/libclshim.so"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cc -O2 -DCL_TARGET_OPENCL_VERSION=300 -o "$work/client" bench/compile_link_query.c -lOpenCL
{
    echo "| policy | run | compile+link s | binary query s | query / compile+link | load s | wall s |"
    echo "|---|---|---|---|---|---|---|"
    for r in $(seq 1 "$repeats"); do
        for policy in pass substitute; do
            dir="$work/$policy-$r"
            mkdir -p "$dir/kc" "$dir/traces"
            t0=$(date +%s.%N)
            POCL_CACHE_DIR="$dir/kc" CLSHIM_BINARIES=$policy CLSHIM_SUMMARY=0 \
                CLSHIM_TRACE_DIR="$dir/traces" LD_PRELOAD="$shim" \
                "$work/client" "$stmts" "$RANDOM$r" > "$dir/out"
            t1=$(date +%s.%N)
            python3 - "$dir/traces" "$policy" "$r" "$t0" "$t1" <<'PY'
import json, pathlib, sys
d, policy, run, t0, t1 = sys.argv[1:]
recs = [json.loads(l) for f in pathlib.Path(d).glob("*") for l in open(f)]
cl = sum(x["seconds"] for x in recs if x["event"] in ("compile", "link"))
q = sum(x["seconds"] for x in recs if x["event"] == "binary_query")
load = sum(x["seconds"] for x in recs if x["event"] == "binary_load")
print(f"| {policy} | {run} | {cl:.3f} | {q:.6f} | {100 * q / cl:.3g}% | {load:.3f} | {float(t1) - float(t0):.2f} |")
PY
        done
    done
} > "$out"
