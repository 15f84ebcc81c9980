#!/usr/bin/env bash
# The program cache's first job and its payback, in one command: installs what it needs (Debian
# packages, .venv/current), builds the release clshim, then runs bench/first_job.py
# with the given options, e.g.
#   bench/first_job.sh                                      # 2 ranks, 4 kernels x 300 statements, 3 repeats
#   bench/first_job.sh --repeat 1                           # a quick look
# It is a benchmark: scripts/test does not run it.
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib.sh"
cd "$CLSHIM_ROOT"
ensure_venv current
python_bench first_job.py "$@"
