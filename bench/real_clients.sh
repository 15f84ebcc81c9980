#!/usr/bin/env bash
# Real clients benchmark: OpenCL software not written here (hashcat, CLBlast, clFFT,
# Boost.Compute; the same four tests/clients/real_clients.rs checks; and pyopencl 2023.1, which
# still caches binaries on pocl, running bench/workload.py), each started on cold caches
# then again on the same warm caches, without clshim, under `clshim run --binaries pass`,
# under `--binaries substitute` (clshim's defaults otherwise: since 2026-12-06 the node's
# warm service makes the driver's binaries of what the cold run handed out while its
# processes wait at their exit, so the warm run loads them; with the service off, as it was
# by default before, a warm load builds the clshim binary's recipe again, which the kept
# compile makes pocl's cache hit),
# and under `--binaries substitute` with `clshim warm` run by hand between the cold and the
# warm run (it makes the driver's binaries of the requests left, so every warm load that
# can be served takes the driver's binary; its own time is printed apart). Until 0.2 the
# cold run of that configuration set CLSHIM_WARM=1 to leave requests. Every cold run gets fresh caches (the client's own and pocl's
# POCL_CACHE_DIR) and a fresh native store under bench/out/real-clients/. Prints one row per client and
# configuration: wall seconds of the cold and the warm run (median of the repeats, with
# min-max), and the binary-query share of build time that `clshim report --json` shows
# for the cold run. clFFT also runs with its binary cache off (CLFFT_CACHE_PATH unset),
# the baseline a binary cache should not lose to.
#
#   bench/real_clients.sh                        # all three, 3 repeats
#   bench/real_clients.sh --repeat 1 clblast     # a quick look at one client
#
# It is a benchmark: scripts/test does not run it. Keep the machine otherwise idle; the
# configurations of one repeat run one after the other, so load drifts hit them alike.
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib.sh"
cd "$CLSHIM_ROOT"

repeat=3
clients=()
while [ $# -gt 0 ]; do
    case "$1" in
        --repeat) repeat="$2"; shift 2 ;;
        --repeat=*) repeat="${1#*=}"; shift ;;
        hashcat|clblast|clfft|boost|pyopencl) clients+=("$1"); shift ;;
        *) die "usage: bench/real_clients.sh [--repeat N] [hashcat] [clblast] [clfft] [boost] [pyopencl]" ;;
    esac
done
[ "${#clients[@]}" -gt 0 ] || clients=(hashcat clblast clfft boost pyopencl)

ensure_system_packages
ensure_cargo
clshim_opencl_env
cargo build --release --quiet
clshim="$CLSHIM_ROOT/target/release/clshim"
out="$CLSHIM_ROOT/bench/out/real-clients"
rm -rf "$out"
mkdir -p "$out/bin"
cc -O1 -Wall -DCL_TARGET_OPENCL_VERSION=300 -o "$out/bin/clblast_sgemm" tests/c/clblast_sgemm.c -lclblast -lOpenCL
cc -O1 -Wall -DCL_TARGET_OPENCL_VERSION=300 -o "$out/bin/clfft_forward" tests/c/clfft_forward.c -lclFFT -lOpenCL
c++ -O1 -Wall -DBOOST_BIND_GLOBAL_PLACEHOLDERS -DCL_TARGET_OPENCL_VERSION=120 \
    -o "$out/bin/boost_compute_transform" tests/c/boost_compute_transform.cpp -lOpenCL -lboost_filesystem

# client_cmd CLIENT CONFIG DIR: sets the environment of a run with its caches under DIR
# and fills the array `cmd`.
client_cmd() {
    local client="$1" config="$2" d="$3"
    export POCL_CACHE_DIR="$d/pocl"
    # A temporary folder of the run's own, as a batch job gets one on its node: since 0.2
    # clshim run shares compiles through it, and a cold run must not take another
    # configuration's compiles of the same programs from there.
    mkdir -p "$d/tmp"; export TMPDIR="$d/tmp"
    case "$client" in
        hashcat)
            export HOME="$d/home" XDG_CACHE_HOME="$d/home/cache" XDG_DATA_HOME="$d/home/data" \
                XDG_CONFIG_HOME="$d/home/config"
            # md5("123"), brute force over three digits on CPU devices (the test's input)
            cmd=(hashcat -m 0 -a 3 --force -O -D 1 --quiet --potfile-disable --logfile-disable
                202cb962ac59075b964b07152d234b70 '?d?d?d') ;;
        clblast) cmd=("$out/bin/clblast_sgemm" 64) ;;
        clfft)
            unset CLFFT_CACHE_PATH
            if [ "$config" != nocache ]; then
                # clFFT caches only into a folder that exists
                mkdir -p "$d/clfft"; export CLFFT_CACHE_PATH="$d/clfft"
            fi
            cmd=("$out/bin/clfft_forward") ;;
        boost)
            export HOME="$d/home" # the offline cache is $HOME/.boost_compute
            cmd=("$out/bin/boost_compute_transform") ;;
        pyopencl)
            # pyopencl's binary cache is under $XDG_CACHE_HOME/pyopencl
            export XDG_CACHE_HOME="$d/xdg"
            cmd=("$CLSHIM_ROOT/.venv/old/bin/python" bench/workload.py -n 4 -s 200) ;;
    esac
}

# one CLIENT CONFIG REP: a cold then a warm run in a fresh folder (CONFIG: none, pass,
# substitute, warmstep: substitute with `clshim warm` run between the two runs, or nocache:
# no clshim and the client's cache off); appends two rows to raw.tsv (client, config,
# rep, cold|warm, wall seconds, query share, query seconds, build seconds; the last three
# from clshim's report, "-" without clshim), and for warmstep a row of the warm step's
# own wall seconds (phase "step").
one() {
    local client="$1" config="$2" rep="$3" d="$out/$1-$2-$3" phase t0 t1 shim=() cmd=()
    mkdir -p "$d"
    for phase in cold warm; do
        shim=()
        case "$config" in
            pass|substitute|warmstep)
                local policy="$config"
                [ "$config" != warmstep ] || policy=substitute
                shim=("$clshim" run --binaries "$policy" --native-store "$d/native" --no-summary
                    --trace-dir "$d/trace-$phase" --) ;;
        esac
        if [ "$phase" = warm ] && [ "$config" = warmstep ]; then
            # The node's warm service (on by default) ends with the cold run's last
            # process, and its workers with it; a request a worker had claimed stays
            # claimed until that worker is gone. Wait for any service and every claim's
            # process to be gone (at most 10 s) before timing the step.
            waited_out() {
                local c pid
                pgrep -f -- "clshim warm .*--store $d/native( |\$)" > /dev/null && return 1
                for c in "$d"/native/requests/*.claim; do
                    [ -e "$c" ] || continue
                    pid=$(awk '{print $NF; exit}' "$c") # clshim-claim 1 HOST PID
                    [ ! -e "/proc/$pid" ] || return 1
                done
            }
            for _ in $(seq 200); do
                waited_out && break
                sleep 0.05
            done
            t0=$(date +%s.%N)
            ( client_cmd "$client" "$config" "$d"; "$clshim" warm --store "$d/native" ) \
                2> "$d/warmstep.err" || { echo "FAILED: $client warm step" >&2; exit 1; }
            t1=$(date +%s.%N)
            printf '%s\t%s\t%s\tstep\t%s\t-\t-\t-\n' "$client" "$config" "$rep" \
                "$(python3 -c "print(f'{$t1 - $t0:.3f}')")" >> "$out/raw.tsv"
            log "$client warm step: $(tail -n 1 "$out/raw.tsv" | cut -f5) s: $(tail -n 1 "$d/warmstep.err")"
        fi
        (
            client_cmd "$client" "$config" "$d"
            t0=$(date +%s.%N)
            "${shim[@]}" "${cmd[@]}" > "$d/$phase.out" 2> "$d/$phase.err" \
                || { echo "FAILED: $client $config $phase (see $d/$phase.err)" >&2; exit 1; }
            t1=$(date +%s.%N)
            echo "$t0 $t1" > "$d/$phase.time"
        )
        local share=- qs=- bs=-
        if [ "${#shim[@]}" -gt 0 ]; then
            read -r share qs bs < <("$clshim" report --json "$d/trace-$phase" | python3 -c '
import json, sys
r = json.load(sys.stdin)
print(r["binary_query_share"], r["binary_query_seconds"], r["build_seconds"])')
        fi
        read -r t0 t1 < "$d/$phase.time"
        printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$client" "$config" "$rep" "$phase" \
            "$(python3 -c "print(f'{$t1 - $t0:.3f}')")" "$share" "$qs" "$bs" >> "$out/raw.tsv"
        log "$client $config rep $rep $phase: $(tail -n 1 "$out/raw.tsv" | cut -f5) s, query share $share"
    done
}

v() { dpkg-query -W -f '${Version}' "$1"; }
log "pocl $(v pocl-opencl-icd), hashcat $(v hashcat), CLBlast $(v libclblast-dev), clFFT $(v libclfft-dev), Boost $(v libboost-dev); clshim $(git rev-parse --short HEAD)"
for rep in $(seq 1 "$repeat"); do
    for client in "${clients[@]}"; do
        for config in none pass substitute warmstep; do
            one "$client" "$config" "$rep"
        done
        # clFFT has a switch for its binary cache: the baseline with it off
        [ "$client" != clfft ] || one clfft nocache "$rep"
    done
done

python3 - "$out/raw.tsv" <<'PY'
import statistics, sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1])]
def cell(vals):
    vals = sorted(vals)
    return f"{statistics.median(vals):7.2f} ({vals[0]:.2f}-{vals[-1]:.2f})"
keys = []
for r in rows:
    if (r[0], r[1]) not in keys:
        keys.append((r[0], r[1]))
names = {"none": "no clshim", "nocache": "no clshim, cache off", "pass": "--binaries pass",
         "substitute": "--binaries substitute", "warmstep": "substitute + clshim warm"}
print(f"{'client':8} {'configuration':24} {'cold s, median (min-max)':>26} {'warm s, median (min-max)':>26}  query share cold (warm)")
base = {}
for client, config in keys:
    sel = [r for r in rows if r[0] == client and r[1] == config]
    cold = [float(r[4]) for r in sel if r[3] == "cold"]
    warm = [float(r[4]) for r in sel if r[3] == "warm"]
    share = "-"
    if config in ("pass", "substitute", "warmstep"):
        sc = statistics.median(float(r[5]) for r in sel if r[3] == "cold")
        sw = statistics.median(float(r[5]) for r in sel if r[3] == "warm")
        share = f"{100 * sc:.0f}% ({100 * sw:.0f}%)"
    steps = [float(r[4]) for r in sel if r[3] == "step"]
    if steps:
        share += f"; warm step {cell(steps).strip()} s"
    print(f"{client:8} {names[config]:24} {cell(cold):>26} {cell(warm):>26}  {share}")
    base.setdefault(client, {})[config] = (statistics.median(cold), statistics.median(warm))
print()
print("ratios of medians, cold / warm:")
for client, b in base.items():
    n = b.get("none")
    for config, (c, w) in b.items():
        if config != "none" and n:
            print(f"  {client:8} {names[config]:24} / no clshim: {c / n[0]:.2f} / {w / n[1]:.2f}")
print()
print("substitute / no clshim, before (clshim's defaults) and after (clshim warm between the runs):")
print(f"  {'client':8} {'cold before':>12} {'warm before':>12} {'cold after':>11} {'warm after':>11}")
for client, b in base.items():
    n, before, after = b.get("none"), b.get("substitute"), b.get("warmstep")
    if n and before and after:
        print(f"  {client:8} {before[0] / n[0]:12.2f} {before[1] / n[1]:12.2f} "
              f"{after[0] / n[0]:11.2f} {after[1] / n[1]:11.2f}")
PY
