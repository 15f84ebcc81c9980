#!/usr/bin/env bash
# Binary-query cost of OpenCL platforms side by side, for the same kernels, measured in one
# run. Each case builds fresh kernels (a new --seed per run, which changes one constant of
# the source, and a cold pocl kernel cache) with bench/query_timing.c, under clshim in
# `pass` mode (it only records), and bench/query_cost.py turns clshim's trace records into
# a Markdown table.
#
#   bench/query_cost.sh [OUT.md]     (default: bench/results/intel-query-cost.md)
#
# Environment (all optional):
#   REPEATS=3 CASES="4x1 4x100 2x300"   the work: repeats of every case, kernels x statements
#   PLATFORMS="Intel Portable"          the platforms compared, each a substring of its
#                                       CL_PLATFORM_NAME (e.g. "NVIDIA Portable" on a GPU machine)
#   VENDORS=DIR                         an ICD folder (.icd files) to use with the system's
#                                       OpenCL loader; without it: pocl and Intel's CPU
#                                       runtime behind the Khronos loader of the `intel` venv
#                                       (scripts/lib.sh installs it)
#   SHIM=PATH                           a libclshim.so to use instead of building the release one
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib.sh"
cd "$CLSHIM_ROOT"
out="${1:-bench/results/intel-query-cost.md}"
repeats="${REPEATS:-3}"
cases="${CASES:-4x1 4x100 2x300}"
read -r -a platforms <<<"${PLATFORMS:-Intel Portable}"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
if [ -n "${VENDORS:-}" ]; then
    vendors="$VENDORS"
    llp="${LD_LIBRARY_PATH:-}"
    loader="the system's $(ldconfig -p | sed -n 's/^\t*libOpenCL.so.1 .*=> //p' | head -1)"
else
    ensure_system_packages
    ensure_venv intel
    llp="$CLSHIM_ROOT/.venv/intel/lib"
    vendors="$work/vendors"
    mkdir -p "$vendors"
    tr -d '\n' < /etc/OpenCL/vendors/pocl.icd > "$vendors/pocl.icd"
    printf '%s' "$llp/libintelocl.so" > "$vendors/intel-cpu.icd"
    loader="the Khronos ICD loader $(basename "$(readlink -f "$llp/libOpenCL.so.1")") from PyPI's intel-opencl-rt"
fi
if [ -n "${SHIM:-}" ]; then
    shim="$(readlink -f "$SHIM")"
    shim_text="the library $SHIM"
else
    ensure_cargo
    cargo build --quiet --release --lib
    shim="$CLSHIM_ROOT/target/release/libclshim.so"
    shim_text="release build"
fi
cc -O1 -g -Wall -DCL_TARGET_OPENCL_VERSION=300 -o "$work/query_timing" bench/query_timing.c -lOpenCL
qt() { env LD_LIBRARY_PATH="$llp" OCL_ICD_VENDORS="$vendors" "$@"; }

started="$(date -u '+%Y-%m-%d %H:%M UTC')"
seed=$(( $(date +%s) % 100000 ))
for r in $(seq 1 "$repeats"); do
    for c in $cases; do
        n="${c%x*}" s="${c#*x}"
        # Rotate the platform order so none always runs on a warmer machine.
        order=("${platforms[@]}")
        for ((k = 1; k < r; k++)); do order=("${order[@]:1}" "${order[0]}"); done
        for p in "${order[@]}"; do
            seed=$((seed + 1))
            log "repeat $r: $p, $n kernels x $s statements"
            qt POCL_CACHE_DIR="$work/kcache-$seed" LD_PRELOAD="$shim" \
                CLSHIM_TRACE_DIR="$work/traces/$c" CLSHIM_SUMMARY=0 \
                "$work/query_timing" --platform="$p" --kernels="$n" --statements="$s" --seed="$seed" \
                > "$work/run-$seed.txt"
            grep -q 'result=ok' "$work/run-$seed.txt" || die "query_timing failed: $(cat "$work/run-$seed.txt")"
        done
    done
done
info=""
for p in "${platforms[@]}"; do
    info+="$(qt POCL_CACHE_DIR="$work/kcache-info" "$work/query_timing" --platform="$p" --kernels=1 --statements=1 --info --no-run | sed -n 's/^info //p')"$'\n'
done
python3 bench/query_cost.py --started "$started" --repeats "$repeats" --cases "$cases" \
    --commit "$(git rev-parse --short HEAD)" --cpu "$(lscpu | sed -n 's/^Model name: *//p' | head -1)" \
    --cores "$(nproc)" --info "$info" --loader "$loader" --shim "$shim_text" \
    "$work/traces" > "$out"
log "wrote $out"
