#!/usr/bin/env bash
# The cost of clshim on a kernel launch already seen (the call every application makes most),
# against the real implementation: instructions per clEnqueueNDRangeKernel counted by
# callgrind (only the enqueue calls: bench/hot_path.c toggles collection around them, and
# only the calling thread's count is read), which is noise-free on a shared machine, and
# the time per call beside it. Each door is run RUNS times, alternating; medians.
# Usage: bench/hot_path.sh [RUNS] [CALLS]              (from the repository root)
#   SHIM=path/libclshim.so   the library to measure (default: a release build made here)
#   BEFORE=path/libclshim.so another build to measure beside it (e.g. an older commit's)
#   BIN=path/hot_path        the client (default: built here from bench/hot_path.c)
#   VG_RUNS=N                callgrind runs per door (default RUNS), each at most VG_TIMEOUT s
# Without valgrind only the timings are printed.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-3}
CALLS=${2:-2560}
OUT=bench/out/hot_path; mkdir -p "$OUT"
if [ -z "${SHIM:-}" ]; then
  cargo build --release -q --lib
  SHIM=$PWD/target/release/libclshim.so
fi
if [ -z "${BIN:-}" ]; then
  BIN=$OUT/hot_path
  cc -O2 -o "$BIN" bench/hot_path.c -lOpenCL
fi
export POCL_CACHE_DIR=${POCL_CACHE_DIR:-$PWD/$OUT/pocl-cache}
unset LD_PRELOAD OPENCL_LAYERS
export CLSHIM_TRACE_DIR=$PWD/$OUT/traces CLSHIM_SUMMARY=0
doors="plain preload layer"
[ -n "${BEFORE:-}" ] && doors="$doors before-preload before-layer"
with_door() { # with_door DOOR CMD...: runs CMD under DOOR
  local door=$1; shift
  case $door in
    plain) "$@" ;;
    preload) LD_PRELOAD=$SHIM "$@" ;;
    layer) OPENCL_LAYERS=$SHIM "$@" ;;
    before-preload) LD_PRELOAD=$BEFORE "$@" ;;
    before-layer) OPENCL_LAYERS=$BEFORE "$@" ;;
  esac
}
median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
"$BIN" 512 >/dev/null # compiles the kernel into pocl's cache once, outside the counts
have_valgrind=0
command -v valgrind >/dev/null && have_valgrind=1
rm -f "$OUT"/ns.* "$OUT"/ir.*
for ((r = 0; r < RUNS; r++)); do
  for door in $doors; do
    with_door "$door" "$BIN" "$((CALLS * 10))" | awk '/^ns\/call:/ {print $2}' >>"$OUT/ns.$door"
    if [ "$have_valgrind" = 1 ] && [ "$r" -lt "${VG_RUNS:-$RUNS}" ]; then
      rm -f "$OUT"/cg.out*
      with_door "$door" timeout "${VG_TIMEOUT:-600}" valgrind --tool=callgrind \
        --collect-atstart=no --separate-threads=yes \
        --callgrind-out-file="$PWD/$OUT/cg.out" "$BIN" "$CALLS" >/dev/null 2>&1 || true
      # Thread 1, the one that made the calls.
      [ -f "$OUT/cg.out-01" ] &&
        awk -v n="$CALLS" '/^totals:/ {printf "%.1f\n", $2 / n}' "$OUT/cg.out-01" >>"$OUT/ir.$door"
    fi
  done
done
{
  echo "clEnqueueNDRangeKernel of a kernel and configuration already launched, $CALLS calls counted"
  echo "(medians of ${VG_RUNS:-$RUNS} counted runs and $RUNS timed runs of $((CALLS * 10)) calls per door)"
  echo
  echo "| door | instructions/call | added | time/call |"
  echo "|---|---|---|---|"
  ir0=1; [ -s "$OUT/ir.plain" ] && ir0=$(median <"$OUT/ir.plain")
  for door in $doors; do
    ns=$(median <"$OUT/ns.$door")
    if [ "$have_valgrind" = 1 ] && [ -s "$OUT/ir.$door" ]; then
      ir=$(median <"$OUT/ir.$door")
      awk -v d="$door" -v ir="$ir" -v ir0="$ir0" -v ns="$ns" 'BEGIN {
        printf "| %s | %.1f | %+.1f (%+.2f%%) | %.1f ns |\n", d, ir, ir - ir0, 100 * (ir - ir0) / ir0, ns }'
    else
      echo "| $door | (not counted) | | $ns ns |"
    fi
  done
} | tee "$OUT/summary.md"
