#!/usr/bin/env bash
# Nodes that share a store (issue 38): 1, 2 and 4 simulated hosts (tests/common/hosts.rs:
# own hostnames, PID namespaces and scratch, the home over sshfs) run one 2-rank job at
# the same moment, with a store of each node's own against the one store in the shared
# home; it prints the walls, compiles per program, CPU, and what a node paid to wait for
# another's compile. Release build. Needs root, FUSE and sshfs (installed here). E.g.
#   bench/nodes.sh             # 3 runs of each case, 6 programs of 600 lines
#   bench/nodes.sh 5           # 5 runs of each
# CLSHIM_BENCH_PROGRAMS and CLSHIM_BENCH_LINES change the job. scripts/test does not run it.
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib.sh"
cd "$CLSHIM_ROOT"
ensure_system_packages
ensure_cargo
export CLSHIM_BENCH_REPEAT="${1:-3}"
cargo test --release --quiet --test policy nodes_bench -- --ignored --nocapture --test-threads=1
