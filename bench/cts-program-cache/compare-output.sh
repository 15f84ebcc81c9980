#!/bin/bash
# masked output of each sub-test in CONFIG against (a): clshim's exit line removed,
# pointers, timings, pocl temporary files and kernel-cache paths masked.
R=/work/cts; LOGS=$R/logs-v2   # v2: the rerun's logs (kernel caches in state-v2)
mask() {
  grep -v '^clshim: ' "$1" | sed -E \
    -e 's/0x[0-9a-fA-F]+/0xPTR/g' \
    -e 's#/work/cts/state(-v2)?/kc-[a-z0-9]+-[a-z]+#KC#g' \
    -e 's/tempfile_[A-Za-z0-9]+/tempfile_X/g' \
    -e 's/(Performance Number|time|Time)[^\n]*[0-9.]+ *(ms|s|us|ns)?/\1 <T>/g' \
    -e 's/[0-9]+\.[0-9]+ (ms|s|us|ns|seconds)/<T> \1/g'
}
for cfg in "$@"; do
  for s in compiler api; do
    n=0; d=0; list=""
    for f in $LOGS/a/$s/*.log; do
      t=$(basename $f .log); n=$((n+1))
      if ! cmp -s <(mask $f) <(mask $LOGS/$cfg/$s/$t.log); then d=$((d+1)); list="$list $t"; fi
    done
    echo "($cfg) test_$s: $d of $n outputs differ from (a):$list"
  done
done
