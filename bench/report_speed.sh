#!/bin/sh
# Benchmark for `clshim report` on a big job: 256 rank files holding 10,000 records in
# all (a `process` header, then builds of a few shared programs each followed by the
# BINARY_SIZES and BINARIES queries a binary cache makes), written from
# docs/trace-schema.md. Prints the best wall time of 5 runs of the table, --json and --chrome.
#
#   bench/report_speed.sh                 # builds target/release/clshim first
#   CLSHIM_BIN=target/debug/clshim bench/report_speed.sh
#   FILES=1024 RECORDS=100000 bench/report_speed.sh
set -eu
cd "$(dirname "$0")/.."
FILES=${FILES:-256}
RECORDS=${RECORDS:-10000}
if [ -z "${CLSHIM_BIN:-}" ]; then
    cargo build --release --quiet --bin clshim
    CLSHIM_BIN=target/release/clshim
fi
DIR=${BENCH_DIR:-target/bench-report}
rm -rf "$DIR"
mkdir -p "$DIR"

python3 - "$DIR" "$FILES" "$RECORDS" <<'PY'
import json, random, sys
d, files, records = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rnd = random.Random(1)
dev = {"name": "cpu-haswell-AMD EPYC 7B13", "type": "CPU",
       "platform": "Portable Computing Language", "vendor": "AuthenticAMD",
       "driver": "3.1", "matched": True}
progs = [(["k%d_%d" % (p, k) for k in range(1 + p % 5)], "fnv1a64:%016x" % (0x9e3779b97f4a7c15 * (p + 1) % 2**64))
         for p in range(40)]
per_file = [(records - files) // files + (1 if i < (records - files) % files else 0) for i in range(files)]
for rank in range(files):
    host = "node%03d" % (rank // 64)
    pid = 10000 + rank
    t = 1750000000.0 + rnd.random()
    base = {"schema": 1, "pid": pid, "rank": rank, "tid": pid}
    lines = [dict(base, event="process", ts=t, seconds=0.0, host=host,
                  exe="/usr/bin/python3", argv=["python", "app.py"], ppid=1, size=files,
                  rank_source="PMI_RANK", clshim_version="0.1.0", mode="preload",
                  policy="pass", devices_filter="pocl-cpu")]
    n, prog_id = per_file[rank], 0
    while n > 0:
        prog_id += 1
        kernels, h = progs[(rank + prog_id) % len(progs)]
        s = rnd.uniform(0.2, 1.5)
        t += 0.01
        lines.append(dict(base, event="build", ts=t, seconds=s, program=prog_id,
                          call="clBuildProgram", result=0, result_name="CL_SUCCESS",
                          devices=[dev], options="-cl-fast-relaxed-math", **{"async": False},
                          source={"origin": "source", "hash": h, "length": 5000}, kernels=kernels))
        n -= 1
        for param, q in (("CL_PROGRAM_BINARY_SIZES", 3 * s), ("CL_PROGRAM_BINARIES", 0.001)):
            if n == 0:
                break
            t += s
            lines.append(dict(base, event="binary_query", ts=t, seconds=q, program=prog_id,
                              call="clGetProgramInfo", result=0, result_name="CL_SUCCESS",
                              devices=[dev], param=param, action="forward",
                              actions=["forward"], sizes=[63261]))
            n -= 1
    with open("%s/clshim-%s-r%d-p%d.jsonl" % (d, host, rank, pid), "w") as f:
        f.write("".join(json.dumps(l, separators=(",", ":")) + "\n" for l in lines))
PY

echo "$(ls "$DIR" | wc -l) files, $(cat "$DIR"/*.jsonl | wc -l) records, $(du -sh "$DIR" | cut -f1)"
best() {
    # Best of 5 wall times in seconds, of "$@" with output discarded.
    python3 - "$@" <<'PY'
import subprocess, sys, time
ts = []
for _ in range(5):
    t = time.perf_counter()
    r = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL)
    ts.append(time.perf_counter() - t)
    if r.returncode != 0:
        sys.exit("exit status %d: %s" % (r.returncode, " ".join(sys.argv[1:])))
print("%.3f s" % min(ts))
PY
}
echo "report (table):       $(best "$CLSHIM_BIN" report "$DIR")"
echo "report --json:        $(best "$CLSHIM_BIN" report --json "$DIR")"
echo "report --chrome FILE: $(best "$CLSHIM_BIN" report --chrome "$DIR.chrome.json" "$DIR")"
