#!/usr/bin/env bash
# POCL_WORK_GROUP_SPECIALIZATION=0 against pocl's default, side by side: how many first
# launches compile, how long first launches take in all, and what a steady-state launch
# costs afterwards, for one kernel launched in 5 work-group configurations, with and
# without a binary query before the launches (pyopencl's cache asks for binaries). Each
# run has its own cold kernel cache. Medians of REPS alternating runs.
# Usage: bench/specialization.sh [REPS] [STATEMENTS]     (from the repository root)
set -euo pipefail
cd "$(dirname "$0")/.."
REPS=${1:-5}
STATEMENTS=${2:-100}
OUT=bench/out/specialization; rm -rf "$OUT"; mkdir -p "$OUT"
cc -O2 -o "$OUT/specialization" bench/specialization.c -lOpenCL
unset LD_PRELOAD OPENCL_LAYERS POCL_WORK_GROUP_SPECIALIZATION
for ((r = 0; r < REPS; r++)); do
  for query in noquery query; do
    for spec in default 0; do
      cache="$OUT/cache-$r-$query-$spec"
      if [ "$spec" = 0 ]; then
        POCL_WORK_GROUP_SPECIALIZATION=0 POCL_CACHE_DIR=$cache "$OUT/specialization" "$STATEMENTS" 200 "$query"
      else
        POCL_CACHE_DIR=$cache "$OUT/specialization" "$STATEMENTS" 200 "$query"
      fi >"$OUT/run-$r-$query-$spec.txt"
      rm -rf "$cache"
    done
  done
done
python3 - "$OUT" "$REPS" "$STATEMENTS" <<'PY' | tee "$OUT/table.md"
import pathlib, statistics, sys
out, reps, statements = pathlib.Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
def parse(path):
    r = {"compiles": 0, "first": 0.0, "query": 0.0}
    for line in path.read_text().splitlines():
        w = line.split()
        if w[0] == "launch":
            first = float(w[4])
            r["first"] += first
            r["compiles"] += first > 0.02  # a launch that compiled; others take milliseconds
        elif w[0] == "binary_query":
            r["query"] = float(w[1])
        elif w[0] == "steady_launch":
            r["steady"] = float(w[1])
        elif w[0] == "build":
            r["build"] = float(w[1])
    return r
print(f"pocl work-group specialisation: 1 kernel of {statements} statements, 5 launch configurations "
      f"(global 4096 local 64/128/NULL, 1000/NULL, 65536/NULL); medians of {reps} runs\n")
print("| binary query first | POCL_WORK_GROUP_SPECIALIZATION | first launches that compiled | first launches, s (sum of 5) | binary query, s | steady-state launch (65536 items), ms |")
print("|---|---|---|---|---|---|")
for query in ("noquery", "query"):
    for spec in ("default", "0"):
        runs = [parse(out / f"run-{r}-{query}-{spec}.txt") for r in range(reps)]
        med = lambda k: statistics.median(x[k] for x in runs)
        print(f"| {'yes' if query == 'query' else 'no'} | {'unset' if spec == 'default' else '0'} | "
              f"{med('compiles'):.0f} of 5 | {med('first'):.3f} | "
              f"{med('query'):.3f} | {1e3 * med('steady'):.3f} |")
PY
