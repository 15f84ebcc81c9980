#!/usr/bin/env bash
# Per-rank wrapper for mpiexec: gives each rank its own cold caches, as on a cluster
# whose ranks start on fresh nodes, then runs the command.
#   usage: mpiexec -n R bench/rank_env.sh CACHE_ROOT command [args...]
# POCL_CACHE_DIR (pocl's kcache) and XDG_CACHE_HOME (pyopencl's binary cache lives under
# it) become CACHE_ROOT/pocl_rank<r> and CACHE_ROOT/xdg_rank<r>, r being the rank from
# the launcher (mpich: PMI_RANK). CLSHIM_BENCH_PRELOAD, when set, becomes LD_PRELOAD of
# the command only, so the launcher itself never runs under the shim.
set -euo pipefail
root="$1"; shift
r="${PMI_RANK:-${OMPI_COMM_WORLD_RANK:-${PALS_RANKID:-0}}}"
export POCL_CACHE_DIR="$root/pocl_rank$r"
export XDG_CACHE_HOME="$root/xdg_rank$r"
if [ -n "${CLSHIM_BENCH_PRELOAD:-}" ]; then
    export LD_PRELOAD="$CLSHIM_BENCH_PRELOAD"
fi
exec "$@"
