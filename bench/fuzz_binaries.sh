#!/usr/bin/env bash
# The long run of the clshim-binary mutation fuzzer (tests/c/fuzz_binaries.c; the timed
# test tests/driver/fuzz_container.rs runs 10,000 cases): CASES mutated binaries per seed through
# clCreateProgramWithBinary under the debug build of clshim (its checks of unsafe
# preconditions on), on the fake ICD, then a smaller run on real pocl with two devices.
# Every case must be answered as cl-headers/clshim.h says; prints one summary per seed.
# Usage: bench/fuzz_binaries.sh [CASES] [SEEDS]    (from the repository root; about 1 s
# per 10,000 cases on the fake ICD, far slower on pocl)
set -euo pipefail
cd "$(dirname "$0")/.."
CASES=${1:-600000}
SEEDS=${2:-4}
cargo build --lib -q
SHIM=$PWD/target/debug/libclshim.so
OUT=bench/out/fuzz; mkdir -p "$OUT/vendors"
cc -shared -fPIC -O1 -fvisibility=hidden -o "$OUT/libfakeicd.so" tests/fake_icd/fake_icd.c -lpthread
echo "$PWD/$OUT/libfakeicd.so" >"$OUT/vendors/fake.icd"
cc -O1 -g -DCL_TARGET_OPENCL_VERSION=300 -Icl-headers -o "$OUT/fuzz_binaries" \
  tests/c/fuzz_binaries.c -lOpenCL
unset OPENCL_LAYERS
fail=0
for ((s = 1; s <= SEEDS; s++)); do
  seed=$((s * 0x9e3779b1))
  printf 'fake ICD, seed %d: ' "$seed"
  LD_PRELOAD=$SHIM OCL_ICD_VENDORS=$PWD/$OUT/vendors CLSHIM_LOG=off CLSHIM_SUMMARY=0 \
    "$OUT/fuzz_binaries" "$CASES" "$seed" | tail -n 3 || fail=1
done
printf 'pocl, two devices: '
LD_PRELOAD=$SHIM POCL_DEVICES="pthread pthread" CLSHIM_LOG=off CLSHIM_SUMMARY=0 \
  "$OUT/fuzz_binaries" $((CASES / 100)) 7 | tail -n 3 || fail=1
exit $fail
