#!/usr/bin/env bash
# Ranks sharing one compile of a program, in one command: installs what it needs (Debian
# packages, .venv/current), builds the release clshim, then runs bench/shared_builds.py
# with the given options, e.g.
#   bench/shared_builds.sh                                   # 4 kernels x 300 statements, 1 2 4 ranks, 3 repeats
#   bench/shared_builds.sh --ranks 4 --rank-own 0 --repeat 1 # a quick look
# It is a benchmark: scripts/test does not run it.
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib.sh"
cd "$CLSHIM_ROOT"
ensure_venv current
python_bench shared_builds.py "$@"
