#!/usr/bin/env bash
# Prepares the folder .gpu/ that the device tool carries to the GPU machine (issue 7):
# run here (x86-64 Debian 12), in the checkout whose working tree travels:
#   bench/gpu/prepare.sh [CHECKOUT]        (default: the current git checkout)
# It builds the release shim in CHECKOUT, then fills CHECKOUT/.gpu/ with
#   libclshim.so, clshim             the release builds (stripped copies)
#   bin/                             the C test programs of tests/c and query_timing
#   src/, include/CL/                their sources and the OpenCL headers, to rebuild there
#   ocl/                             Debian 12's ocl-icd-libopencl1 unpacked (a loader, in
#                                    case the GPU machine has none)
#   bench/                           binary_policy.py, workload.py, rank_env.sh and the
#                                    bench/gpu scripts of THIS worktree
#   BUILD_INFO                       commit, date, compiler
# CHECKOUT/.gpu/ and CHECKOUT/.whl/ must be ignored there (.git/info/exclude).
# Wheels are fetched separately (see bench/results/gpu-h200.md).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"   # this worktree
co="$(cd "${1:-$(git rev-parse --show-toplevel)}" && pwd)"
g="$co/.gpu"
git -C "$co" check-ignore -q "$g" || { echo "$g is not ignored in $co" >&2; exit 1; }
(cd "$co" && cargo build --release --quiet)
rm -rf "$g"
mkdir -p "$g"/{bin,src,include,ocl,bench}
strip -o "$g/libclshim.so" "$co/target/release/libclshim.so"
strip -o "$g/clshim" "$co/target/release/clshim"
cp "$co"/tests/c/{cltest.h,basic.c,binary_roundtrip.c,dlopen_loader.c,threads.c,async_build.c,compile_link.c} "$g/src/"
cp "$here/bench/gpu/query_timing.c" "$g/src/"
cp -r /usr/include/CL "$g/include/"
CFLAGS=(-O1 -g -Wall -DCL_TARGET_OPENCL_VERSION=300)
for p in basic binary_roundtrip threads async_build compile_link; do
    cc "${CFLAGS[@]}" -o "$g/bin/$p" "$g/src/$p.c" -lOpenCL -lpthread -ldl
done
cc "${CFLAGS[@]}" -o "$g/bin/dlopen_loader" "$g/src/dlopen_loader.c" -ldl
cc "${CFLAGS[@]}" -o "$g/bin/query_timing" "$g/src/query_timing.c" -lOpenCL
(cd /tmp && rm -f ocl-icd-libopencl1_*.deb && apt-get download -q ocl-icd-libopencl1 >/dev/null)
dpkg -x /tmp/ocl-icd-libopencl1_*.deb "$g/ocl"
cp "$here"/bench/{binary_policy.py,workload.py,rank_env.sh} "$g/bench/"
cp "$here"/bench/gpu/{run_all.sh,trace_summary.py,query_times.py} "$g/bench/"
{
    echo "clshim commit $(git -C "$co" rev-parse HEAD) ($(git -C "$co" status --porcelain --untracked-files=no | wc -l) modified tracked files)"
    echo "scripts from $(git -C "$here" rev-parse --abbrev-ref HEAD) $(git -C "$here" rev-parse --short HEAD)"
    echo "built $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(. /etc/os-release; echo "$PRETTY_NAME"), $(cc --version | head -1), $(cargo --version)"
    echo "loader carried: $(basename /tmp/ocl-icd-libopencl1_*.deb)"
} >"$g/BUILD_INFO"
du -sh "$g" "$co/.whl" 2>/dev/null || true
