#!/usr/bin/env bash
# The native store's cost benchmark in one command: installs what it needs (Debian
# packages, .venv/old with pyopencl 2023.1), builds the release clshim, then runs
# bench/store_cost.py with the given options, e.g.
#   bench/store_cost.sh                                   # 2 ranks, 6 kernels x 150 statements, 3 repeats
#   bench/store_cost.sh --ranks 2 -n 4 -s 100 --repeat 1  # a quick look
# It is a benchmark: scripts/test does not run it.
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib.sh"
cd "$CLSHIM_ROOT"
python_bench store_cost.py "$@"
