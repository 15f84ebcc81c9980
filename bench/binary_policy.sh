#!/usr/bin/env bash
# The binary-policy benchmark in one command: installs what it needs (Debian packages,
# .venv/old with pyopencl 2023.1), builds the release shim, then runs
# bench/binary_policy.py with the given options, e.g.
#   bench/binary_policy.sh                                  # 1,2,4 ranks, 4 kernels x 300 statements
#   bench/binary_policy.sh --ranks 1,2 -n 2 -s 200          # a quick check
#   bench/binary_policy.sh --configs a,b,b-warm             # only the no-shim half
# It is a benchmark: scripts/test does not run it. Keep the machine otherwise idle.
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib.sh"
cd "$CLSHIM_ROOT"
python_bench binary_policy.py "$@"
