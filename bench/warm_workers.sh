#!/usr/bin/env bash
# The warm step on one worker against several, in one command: installs what it needs (Debian
# packages, .venv/current), builds the release clshim, then runs bench/warm_workers.py
# with the given options, e.g.
#   bench/warm_workers.sh                                   # 2 ranks, --jobs 1 against every CPU, 3 repeats
#   bench/warm_workers.sh --ranks 16 -n 8 -s 100 --jobs 1 16
# It is a benchmark: scripts/test does not run it.
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib.sh"
cd "$CLSHIM_ROOT"
ensure_venv current
python_bench warm_workers.py "$@"
