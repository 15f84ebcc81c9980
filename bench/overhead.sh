#!/usr/bin/env bash
# The cost of clshim on calls no policy touches, and per build with recording on, measured
# side by side in one run (alternating with and without the shim, median of REPS each).
# Usage: bench/overhead.sh [REPS] [CALLS]      (from the repository root)
set -euo pipefail
cd "$(dirname "$0")/.."
REPS=${1:-7}
CALLS=${2:-1000000}
cargo build --release -q
SHIM=$PWD/target/release/libclshim.so
OUT=bench/out/overhead; mkdir -p "$OUT"
cc -O2 -o "$OUT/overhead" bench/overhead.c -lOpenCL
export POCL_CACHE_DIR=$OUT/pocl-cache
unset LD_PRELOAD OPENCL_LAYERS
median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
run() { # run WITH(0|1) ARGS...: one measurement
  local with=$1; shift
  if [ "$with" = 1 ]; then
    LD_PRELOAD=$SHIM CLSHIM_TRACE_DIR=$OUT/traces CLSHIM_SUMMARY=0 "$OUT/overhead" "$@"
  else
    "$OUT/overhead" "$@"
  fi
}
rm -rf "$OUT/traces"
: >"$OUT/calls0"; : >"$OUT/calls1"; : >"$OUT/builds0"; : >"$OUT/builds1"; : >"$OUT/cold"
for ((r = 0; r < REPS; r++)); do
  for w in 0 1; do
    run $w calls "$CALLS" >>"$OUT/calls$w"
    run $w builds 200 >>"$OUT/builds$w"
  done
  run 0 cold >>"$OUT/cold"
done
c0=$(median <"$OUT/calls0"); c1=$(median <"$OUT/calls1")
b0=$(median <"$OUT/builds0"); b1=$(median <"$OUT/builds1")
cold=$(median <"$OUT/cold")
awk -v c0="$c0" -v c1="$c1" -v b0="$b0" -v b1="$b1" -v cold="$cold" -v reps="$REPS" -v calls="$CALLS" 'BEGIN {
  printf "clshim overhead, median of %d alternating runs each (pocl CPU, %s)\n\n", reps, ENVIRON["HOSTNAME"]
  printf "| measurement | without shim | with shim | added |\n|---|---|---|---|\n"
  printf "| clGetProgramInfo(CL_PROGRAM_NUM_DEVICES), %d calls | %.1f ns/call | %.1f ns/call | %+.1f ns/call |\n", calls, c0, c1, c1 - c0
  printf "| clBuildProgram, pocl kernel-cache hit, recording on | %.1f us | %.1f us | %+.1f us |\n", b0 * 1e6, b1 * 1e6, (b1 - b0) * 1e6
  printf "\nA cold build of the same small kernel takes %.3f s: the added time per build is %.4f%% of it.\n", cold, 100 * (b1 - b0) / cold
}' | tee "$OUT/table.md"
