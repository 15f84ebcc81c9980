#!/bin/sh
# `clshim report` at scale: an hour of a 64-rank job, 2,000,000 records in 64 files
# (about 1 GB), written in a temporary directory from docs/trace-schema.md
# (a `process` header, then builds of a few shared programs, each followed by the
# BINARY_SIZES and BINARIES queries a binary cache makes and a first launch of each
# kernel). Prints wall time and maximum resident memory (GNU time's "Maximum resident
# set size") of the table, --json and --chrome, best of REPEAT runs, with that run's
# CPU time (user + system: less sensitive than wall time to a shared machine's load).
#
#   bench/report_scale.sh                       # builds target/release/clshim first
#   FILES=64 RECORDS=2000000 REPEAT=3 bench/report_scale.sh
#   CLSHIM_BIN=/path/to/clshim KEEP=1 bench/report_scale.sh   # keeps DIR (printed)
#   TRACES=DIR/traces bench/report_scale.sh                     # reuses its traces
#   BASE_BIN=/path/to/older/clshim NO_CHROME=1 bench/report_scale.sh   # side by side
#   LAUNCHES=0 bench/report_scale.sh      # no first_launch records (older clshim skips them)
#   SOURCES=1 FILES=64 RECORDS=64000 bench/report_scale.sh   # kept sources (--sources):
#       100 programs per rank, every other one's text baked with a per-rank size, each
#       rank with its own options for one in ten: 100 program groups of up to 64 variants
#       whose differences the report diffs, from DIR/traces/sources
set -eu
cd "$(dirname "$0")/.."
FILES=${FILES:-64}
RECORDS=${RECORDS:-2000000}
REPEAT=${REPEAT:-3}
if [ -z "${CLSHIM_BIN:-}" ]; then
    cargo build --release --quiet --bin clshim
    CLSHIM_BIN=target/release/clshim
fi
[ -x /usr/bin/time ] || { echo "needs GNU time (/usr/bin/time, Debian package 'time')" >&2; exit 2; }
DIR=$(mktemp -d "${TMPDIR:-/tmp}/clshim-report-scale.XXXXXX")
[ -n "${KEEP:-}" ] || trap 'rm -rf "$DIR"' EXIT
if [ -n "${TRACES:-}" ]; then
    ln -s "$(cd "$TRACES" && pwd)" "$DIR/traces"   # reuse a KEEP=1 run's traces
else
mkdir "$DIR/traces"
python3 - "$DIR/traces" "$FILES" "$RECORDS" "${LAUNCHES:-1}" "${SOURCES:-0}" <<'PY'
import json, os, random, sys
d, files, records, launches = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] != "0"
sources = sys.argv[5] != "0"
rnd = random.Random(1)

def fnv(b):
    h = 0xcbf29ce484222325
    for x in b:
        h = ((h ^ x) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return h

kept_names = set()
def keep(text, ext):
    """Stores a text as clshim --sources does; returns (hash label, reference)."""
    b = text.encode()
    ref = "%016x-%d" % (fnv(b), len(b))
    if ref + ext not in kept_names:
        kept_names.add(ref + ext)
        os.makedirs(d + "/sources", exist_ok=True)
        with open("%s/sources/%s.%s" % (d, ref, ext), "wb") as f:
            f.write(b)
    return "fnv1a64:" + ref[:16], ref

def text_of(p, rank):
    size = 64 * (rank + 1) if p % 2 == 0 else 64
    body = "".join("    acc += x[i + %d] * %d.0f;\n" % (k, k + p) for k in range(60))
    return ("kernel void k%d_0(global float *x, global float *y)\n{\n    int i = get_global_id(0);\n"
            "    float acc = 0.0f;\n    for (int j = 0; j < %d; j++) {\n%s    }\n    y[i] = acc;\n}\n"
            % (p, size, body))
dev = {"name": "cpu-haswell-AMD EPYC 7B13", "type": "CPU",
       "platform": "Portable Computing Language", "vendor": "AuthenticAMD",
       "driver": "3.1", "matched": True}
progs = [(["k%d_%d" % (p, k) for k in range(1 + p % 5)], "fnv1a64:%016x" % (0x9e3779b97f4a7c15 * (p + 1) % 2**64))
         for p in range(40)]
if sources:
    progs = [(["k%d_0" % p], None) for p in range(100)]
dumps = json.JSONEncoder(separators=(",", ":")).encode
for rank in range(files):
    n = records // files + (1 if rank < records % files else 0)
    host = "node%03d" % (rank // 16)
    pid = 10000 + rank
    t = 1750000000.0 + rnd.random()
    inst = "%016x" % rnd.getrandbits(64)
    base = {"schema": 1, "pid": pid, "rank": rank, "tid": pid, "instance": inst}
    with open("%s/clshim-%s-r%d-p%d.jsonl" % (d, host, rank, pid), "w") as f:
        f.write(dumps(dict(base, event="process", ts=t, seconds=0.0, host=host,
                      exe="/usr/bin/python3", argv=["python", "app.py"], ppid=1, size=files,
                      rank_source="PMI_RANK", clshim_version="0.1.0", mode="preload",
                      policy="pass", devices_filter="pocl-cpu")) + "\n")
        n -= 1
        prog_id = 0
        while n > 0:
            prog_id += 1
            p = (rank + prog_id) % len(progs)
            kernels, h = progs[p]
            s = rnd.uniform(0.2, 1.5)
            t += 0.01
            options = "-cl-fast-relaxed-math"
            extra = {}
            if sources:
                if p % 10 == 1:
                    options += " -DRANK=%d" % rank
                h, ref = keep(text_of(p, rank), "cl")
                extra = {"kept": {"source": ref, "options": keep(options, "opt")[1]}}
            out = [dict(base, event="build", ts=t, seconds=s, program=prog_id,
                        call="clBuildProgram", result=0, result_name="CL_SUCCESS",
                        devices=[dev], options=options, **{"async": False},
                        source={"origin": "source", "hash": h, "length": 5000}, kernels=kernels,
                        **extra)]
            for param, q in (("CL_PROGRAM_BINARY_SIZES", 3 * s), ("CL_PROGRAM_BINARIES", 0.001)):
                t += s
                out.append(dict(base, event="binary_query", ts=t, seconds=q, program=prog_id,
                                call="clGetProgramInfo", result=0, result_name="CL_SUCCESS",
                                devices=[dev], param=param, action="forward",
                                actions=["forward"], sizes=[63261]))
            for k in kernels if launches else []:
                t += 0.001
                out.append(dict(base, event="first_launch", ts=t, seconds=2 * s, program=prog_id,
                                call="clEnqueueNDRangeKernel", kernel=k, device=dev, work_dim=1,
                                global_size=[4096], local_size=None, result=0,
                                result_name="CL_SUCCESS"))
            out = out[:n]
            n -= len(out)
            f.write("".join(dumps(l) + "\n" for l in out))
PY
fi

echo "$DIR: $(ls "$DIR"/traces/*.jsonl | wc -l) files, $(cat "$DIR"/traces/*.jsonl | wc -l) records, $(du -shL "$DIR/traces" | cut -f1)$([ -d "$DIR/traces/sources" ] && echo ", $(ls "$DIR/traces/sources" | wc -l) kept texts"); $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
measure() {
    # Best wall time (with its CPU time, user + system) and largest max RSS of $REPEAT
    # runs of "$@", output discarded.
    best= cpu= rss=0
    i=0
    while [ $i -lt "$REPEAT" ]; do
        /usr/bin/time -f '%e %U %S %M' -o "$DIR/time" "$@" >/dev/null 2>"$DIR/err" || {
            st=$?; [ $st -eq 1 ] || { cat "$DIR/err" >&2; exit $st; }; }
        # (GNU time puts "Command exited with non-zero status" first on failure.)
        line=$(tail -n 1 "$DIR/time")
        r=$(python3 -c "w, u, s, m = '$line'.split(); print(w, round(float(u) + float(s), 2), m)")
        w=${r%% *} m=${r##* } c=${r#* }; c=${c% *}
        if [ -z "$best" ] || python3 -c "import sys; sys.exit(not $w < $best)"; then
            best=$w cpu=$c
        fi
        [ "$m" -gt "$rss" ] && rss=$m
        i=$((i + 1))
    done
    echo "$best s (CPU $cpu s), max RSS $((rss / 1024)) MB"
}
for bin in "$CLSHIM_BIN" ${BASE_BIN:-}; do
    echo "$bin:"
    echo "  report (table):       $(measure "$bin" report "$DIR/traces")"
    echo "  report --json:        $(measure "$bin" report --json "$DIR/traces")"
    [ -n "${NO_CHROME:-}" ] && [ "$bin" != "$CLSHIM_BIN" ] && continue
    echo "  report --chrome FILE: $(measure "$bin" report --chrome "$DIR/timeline.json" "$DIR/traces")"
    echo "  timeline: $(du -h "$DIR/timeline.json" | cut -f1)"
done
