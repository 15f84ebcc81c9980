#!/usr/bin/env bash
# The cost of clshim on calls no policy touches, per build with recording on, and per kernel
# launch already seen (the launch path clshim checks for first launches), measured side by
# side in one run (alternating with and without the shim, median of REPS each).
# Usage: bench/overhead.sh [REPS] [CALLS] [LAUNCHES]     (from the repository root)
set -euo pipefail
cd "$(dirname "$0")/.."
REPS=${1:-7}
CALLS=${2:-1000000}
LAUNCHES=${3:-51200}
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
: >"$OUT/calls0"; : >"$OUT/calls1"; : >"$OUT/cold"
: >"$OUT/launches0"; : >"$OUT/launches1"; : >"$OUT/path0"; : >"$OUT/path1"
for ((r = 0; r < REPS; r++)); do
  for w in 0 1; do
    run $w calls "$CALLS" >>"$OUT/calls$w"
    run $w launches "$LAUNCHES" >>"$OUT/launches$w"
    run $w launch-path "$CALLS" >>"$OUT/path$w"
  done
  run 0 cold >>"$OUT/cold"
done
# Per-build work: the application's time for each build minus the forwarded call's time
# that the shim recorded for the same build (its trace "seconds"), paired in order.
run 1 builds 200 >"$OUT/builds-app"
python3 - "$OUT/traces" >"$OUT/builds-recorded" <<'PY'
import json, pathlib, sys
for f in sorted(pathlib.Path(sys.argv[1]).glob("*.jsonl")):
    recs = [json.loads(l) for l in f.read_text().splitlines()]
    builds = [r["seconds"] for r in recs if r["event"] == "build"]
    for s in builds[1:]:  # the first build is the warm-up
        print(f"{s:.9f}")
PY
paste "$OUT/builds-app" "$OUT/builds-recorded" | awk '{print $1 - $2}' >"$OUT/builds-added"
c0=$(median <"$OUT/calls0"); c1=$(median <"$OUT/calls1")
l0=$(median <"$OUT/launches0"); l1=$(median <"$OUT/launches1")
p0=$(median <"$OUT/path0"); p1=$(median <"$OUT/path1")
# Launch runs alternate, so each with-shim run has a neighbour without: their ratio, per pair.
lr=$(paste "$OUT/launches0" "$OUT/launches1" | awk '{print $2 / $1}' | median)
added=$(median <"$OUT/builds-added"); app=$(median <"$OUT/builds-app")
cold=$(median <"$OUT/cold")
awk -v c0="$c0" -v c1="$c1" -v added="$added" -v app="$app" -v cold="$cold" -v reps="$REPS" -v calls="$CALLS" \
    -v l0="$l0" -v l1="$l1" -v lr="$lr" -v p0="$p0" -v p1="$p1" -v launches="$LAUNCHES" 'BEGIN {
  printf "clshim overhead (pocl CPU; medians; calls: %d alternating runs each)\n\n", reps
  printf "| measurement | without shim | with shim | added |\n|---|---|---|---|\n"
  printf "| clGetProgramInfo(CL_PROGRAM_NUM_DEVICES), %d calls | %.1f ns/call | %.1f ns/call | %+.1f ns/call |\n", calls, c0, c1, c1 - c0
  printf "| clBuildProgram with recording on (trace file), 200 builds | - | %.1f ms (kernel-cache hit) | %.1f us/build |\n", app * 1e3, added * 1e6
  printf "| clEnqueueNDRangeKernel of a kernel and configuration already launched, %d calls in batches of 256 (pocl enqueues) | %.0f ns/call | %.0f ns/call | %+.0f ns/call (median paired ratio %.3f) |\n", launches, l0, l1, l1 - l0, lr
  printf "| the same %d calls with the queue'"'"'s enqueue entry returning at once (the call path alone) | %.1f ns/call | %.1f ns/call | %+.1f ns/call |\n", calls, p0, p1, p1 - p0
  printf "\nA cold build of this small kernel takes %.3f s; %.1f us of clshim work per build is %.4f%% of it.\n", cold, added * 1e6, 100 * added / cold
  printf "An already-seen launch costs clshim %.1f ns (call path), %.2f%% of pocl'"'"'s %.0f ns enqueue.\n", p1 - p0, 100 * (p1 - p0) / l0, l0
}' | tee "$OUT/table.md"
