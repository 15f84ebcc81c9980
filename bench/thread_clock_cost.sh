#!/usr/bin/env bash
# What reading CPU clocks costs clshim per record (the cpu_seconds of builds, binary
# queries and first launches; never read on a launch already seen): compiles and runs
# bench/thread_clock_cost.c, which times each clock read alone and sums them per record.
# Usage: bench/thread_clock_cost.sh [CALLS] [REPS]      (from the repository root)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=bench/out/thread_clock_cost; mkdir -p "$OUT"
cc -O2 -o "$OUT/thread_clock_cost" bench/thread_clock_cost.c -lpthread
"$OUT/thread_clock_cost" "${1:-1000000}" "${2:-7}"
