#!/usr/bin/env bash
# The seed's kind of workload (grudge's wave-op-mpi.py --lazy, issue 37) in one command:
# installs what it needs (Debian packages; .venv/seed with grudge's stack at pinned commits,
# which needs the network the first time), builds the release clshim, then runs
# bench/seed.py with the given options: no clshim, a first job and the next job, and the
# first job's compiles against its distinct programs, e.g.
#   bench/seed.sh                  # 4 ranks
#   bench/seed.sh --ranks 16
# It is a benchmark: scripts/test does not run it.
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib.sh"
cd "$CLSHIM_ROOT"
ensure_system_packages
python_bench seed.py "$@"
