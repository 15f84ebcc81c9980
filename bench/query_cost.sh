#!/usr/bin/env bash
# Binary-query cost on Intel's CPU OpenCL runtime beside pocl's, for the same kernels,
# both behind the Khronos ICD loader of the `intel` venv (scripts/lib.sh), measured side
# by side in one run. Each case builds fresh kernels (a new seed per run, a cold pocl
# kernel cache) with bench/gpu/query_timing.c, under clshim in `pass` mode (it only
# records), and bench/query_cost.py turns clshim's trace records into a Markdown table.
#
#   bench/query_cost.sh [OUT.md]     (default: bench/results/intel-query-cost.md)
#   REPEATS=3 CASES="4x1 4x100 2x300" to change the work.
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib.sh"
cd "$CLSHIM_ROOT"
out="${1:-bench/results/intel-query-cost.md}"
repeats="${REPEATS:-3}"
cases="${CASES:-4x1 4x100 2x300}"

ensure_system_packages
ensure_cargo
ensure_venv intel
cargo build --quiet --release --lib
lib="$CLSHIM_ROOT/.venv/intel/lib"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/vendors"
tr -d '\n' < /etc/OpenCL/vendors/pocl.icd > "$work/vendors/pocl.icd"
printf '%s' "$lib/libintelocl.so" > "$work/vendors/intel-cpu.icd"
cc -O1 -g -Wall -DCL_TARGET_OPENCL_VERSION=300 -o "$work/query_timing" bench/gpu/query_timing.c -lOpenCL

started="$(date -u '+%Y-%m-%d %H:%M UTC')"
seed=$(( $(date +%s) % 100000 ))
for r in $(seq 1 "$repeats"); do
    for c in $cases; do
        n="${c%x*}" s="${c#*x}"
        # Alternate the platform order so neither always runs on a warmer machine.
        plats=(Intel Portable); [ $((r % 2)) -eq 0 ] && plats=(Portable Intel)
        for p in "${plats[@]}"; do
            seed=$((seed + 1))
            log "repeat $r: $p, $n kernels x $s statements"
            env LD_LIBRARY_PATH="$lib" OCL_ICD_VENDORS="$work/vendors" \
                POCL_CACHE_DIR="$work/kcache-$seed" LD_PRELOAD="$CLSHIM_ROOT/target/release/libclshim.so" \
                CLSHIM_TRACE_DIR="$work/traces/$c" CLSHIM_SUMMARY=0 \
                "$work/query_timing" --platform="$p" --kernels="$n" --statements="$s" --seed="$seed" \
                > "$work/run-$seed.txt"
            grep -q 'result=ok' "$work/run-$seed.txt" || die "query_timing failed: $(cat "$work/run-$seed.txt")"
        done
    done
done
info="$(env LD_LIBRARY_PATH="$lib" OCL_ICD_VENDORS="$work/vendors" "$work/query_timing" --platform=Intel --kernels=1 --statements=1 --info --no-run | sed -n 's/^info //p')
$(env LD_LIBRARY_PATH="$lib" OCL_ICD_VENDORS="$work/vendors" POCL_CACHE_DIR="$work/kcache-info" "$work/query_timing" --platform=Portable --kernels=1 --statements=1 --info --no-run | sed -n 's/^info //p')"
python3 bench/query_cost.py --started "$started" --repeats "$repeats" --cases "$cases" \
    --commit "$(git rev-parse --short HEAD)" --cpu "$(lscpu | sed -n 's/^Model name: *//p' | head -1)" \
    --cores "$(nproc)" --info "$info" --loader "$(basename "$(readlink -f "$lib/libOpenCL.so.1")")" \
    "$work/traces" > "$out"
log "wrote $out"
