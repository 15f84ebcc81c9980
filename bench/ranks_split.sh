#!/usr/bin/env bash
# The ranks benchmark in one command: installs what it needs (Debian packages, .venv/old
# with pyopencl 2023.1), builds the release clshim, then runs bench/ranks_split.py with
# the given options: the demo workload at each rank count under clshim, and per rank the
# build time split into CPU and waiting, e.g.
#   bench/ranks_split.sh                                    # 1 and 2 ranks, 4 kernels x 300 statements
#   bench/ranks_split.sh --ranks 1,2,4 --repeat 3
#   bench/ranks_split.sh --env POCL_MAX_PTHREAD_COUNT=1 --label one-thread
# It is a benchmark: scripts/test does not run it.
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib.sh"
cd "$CLSHIM_ROOT"
python_bench ranks_split.py "$@"
