#!/usr/bin/env bash
# What a job keeps as it runs, and what that costs and pays (issue 36), in one command:
# installs what it needs (Debian packages, .venv/current and .venv/old), builds the release
# clshim, then runs bench/keep.py with the given options, e.g.
#   bench/keep.sh                  # 3 interleaved repeats
#   bench/keep.sh --repeat 5
# As root with cgroup v1's cpuacct, a group per run counts the CPU of every process of the
# job, clshim's included, and how long any outlived the command; elsewhere the CPU is the
# children's (getrusage). It is a benchmark: scripts/test does not run it.
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib.sh"
cd "$CLSHIM_ROOT"
ensure_system_packages
ensure_venv current
ensure_venv old
python_bench keep.py "$@"
