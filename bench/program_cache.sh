#!/usr/bin/env bash
# The program cache benchmark in one command: installs what it needs (Debian
# packages, .venv/old with pyopencl 2023.1), builds the release clshim, then runs
# bench/program_cache.py with the given options, e.g.
#   bench/program_cache.sh                                   # 8 kernels x 100 statements, 5 repeats
#   bench/program_cache.sh -n 4 -s 100 --repeat 2            # a quick look
# It is a benchmark: scripts/test does not run it.
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib.sh"
cd "$CLSHIM_ROOT"
ensure_venv current
python_bench program_cache.py "$@"
