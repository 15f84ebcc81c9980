#!/usr/bin/env bash
# The cost of clshim on a kernel launch already seen (the call every application makes most),
# against the real implementation: instructions per clEnqueueNDRangeKernel counted by
# callgrind (only the enqueue calls: bench/hot_path.c toggles collection around them, and
# only the calling thread's count is read), which is noise-free on a shared machine, and
# the time per call beside it. Each door is run RUNS times, alternating; medians.
# Besides the whole call, the instructions of clshim's own code and the loader's are
# counted per object (bench/callgrind_objects.py): the rest of the call (pocl, glibc) differs
# between processes by about +-15 instructions, because glibc's malloc takes other paths in
# pocl's enqueue once clshim's allocations sit in the heap; "code" is clshim's share alone.
# Usage: bench/hot_path.sh [RUNS] [CALLS]              (from the repository root)
#   SHIM=path/libclshim.so   the library to measure (default: a release build made here)
#   BEFORE=path/libclshim.so another build to measure beside it (e.g. an older commit's)
#   CLIENT=axpy              bench/hot_path.c (the default); CLIENT=variants:
#                            bench/hot_path_variants.c, with its HP_* knobs from the
#                            environment (HP_ARGS=0: a kernel with no arguments)
#   BIN=path/client          a client built elsewhere (takes CLIENT's arguments)
#   TRACE=0                  no trace directory (default 1: CLSHIM_TRACE_DIR set)
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
  case ${CLIENT:-axpy} in
    axpy) BIN=$OUT/hot_path; cc -O2 -o "$BIN" bench/hot_path.c -lOpenCL ;;
    variants) BIN=$OUT/hot_path_variants; cc -O2 -o "$BIN" bench/hot_path_variants.c -lOpenCL ;;
    *) echo "CLIENT is axpy or variants" >&2; exit 2 ;;
  esac
fi
export POCL_CACHE_DIR=${POCL_CACHE_DIR:-$PWD/$OUT/pocl-cache}
unset LD_PRELOAD OPENCL_LAYERS CLSHIM_TRACE_DIR
export CLSHIM_SUMMARY=0
[ "${TRACE:-1}" = 1 ] && export CLSHIM_TRACE_DIR=$PWD/$OUT/traces
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
door_lib() { # the library a door interposes, as callgrind names its object
  case $1 in
    plain) echo none ;;
    before-*) readlink -f "$BEFORE" ;;
    *) readlink -f "$SHIM" ;;
  esac
}
median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
"$BIN" 512 >/dev/null # compiles the kernel into pocl's cache once, outside the counts
have_valgrind=0
command -v valgrind >/dev/null && have_valgrind=1
rm -f "$OUT"/ns.* "$OUT"/ir.* "$OUT"/code.*
for ((r = 0; r < RUNS; r++)); do
  for door in $doors; do
    with_door "$door" "$BIN" "$((CALLS * 10))" | awk '/^ns\/call:/ {print $2}' >>"$OUT/ns.$door"
    if [ "$have_valgrind" = 1 ] && [ "$r" -lt "${VG_RUNS:-$RUNS}" ]; then
      rm -f "$OUT"/cg.out*
      with_door "$door" timeout "${VG_TIMEOUT:-600}" valgrind --tool=callgrind \
        --collect-atstart=no --separate-threads=yes \
        --callgrind-out-file="$PWD/$OUT/cg.out" "$BIN" "$CALLS" >/dev/null 2>&1 || true
      # Thread 1, the one that made the calls: the whole call, and clshim's and the
      # loader's objects alone.
      if [ -f "$OUT/cg.out-01" ]; then
        awk -v n="$CALLS" '/^totals:/ {printf "%.1f\n", $2 / n}' "$OUT/cg.out-01" >>"$OUT/ir.$door"
        python3 bench/callgrind_objects.py "$OUT/cg.out-01" "$CALLS" |
          awk -F'\t' -v lib="$(door_lib "$door")" '$2 == lib || $2 ~ /libOpenCL/ {s += $1}
            END {printf "%.1f\n", s}' >>"$OUT/code.$door"
      fi
    fi
  done
done
{
  echo "clEnqueueNDRangeKernel of a kernel and configuration already launched, $CALLS calls counted"
  echo "(medians of ${VG_RUNS:-$RUNS} counted runs and $RUNS timed runs of $((CALLS * 10)) calls per door;"
  echo "client $(basename "$BIN") $(env | grep '^HP_' | sort | tr '\n' ' ')trace directory: ${CLSHIM_TRACE_DIR:-none})"
  echo
  echo "| door | instructions/call | added | clshim + loader | added by clshim's code | time/call |"
  echo "|---|---|---|---|---|---|"
  ir0=1 code0=0
  [ -s "$OUT/ir.plain" ] && ir0=$(median <"$OUT/ir.plain") && code0=$(median <"$OUT/code.plain")
  for door in $doors; do
    ns=$(median <"$OUT/ns.$door")
    if [ "$have_valgrind" = 1 ] && [ -s "$OUT/ir.$door" ]; then
      ir=$(median <"$OUT/ir.$door")
      code=$(median <"$OUT/code.$door")
      awk -v d="$door" -v ir="$ir" -v ir0="$ir0" -v c="$code" -v c0="$code0" -v ns="$ns" 'BEGIN {
        printf "| %s | %.1f | %+.1f (%+.2f%%) | %.1f | %+.1f (%+.2f%%) | %.1f ns |\n",
          d, ir, ir - ir0, 100 * (ir - ir0) / ir0, c, c - c0, 100 * (c - c0) / ir0, ns }'
    else
      echo "| $door | (not counted) | | | | $ns ns |"
    fi
  done
} | tee "$OUT/summary.md"
