#!/usr/bin/env bash
# Issue 7's measurements on the GPU machine, run there from the checkout's root after
# bench/gpu/prepare.sh filled .gpu/ here (and the wheels are in .whl/):
#   bash .gpu/bench/run_all.sh STAGE...
# stages (in the order given; `loader=ocl-icd|cuda|carried|system` switches the OpenCL
# loader for the stages after it (default ocl-icd, or $LOADER_KIND), `plats=nv,pocl` the
# platforms of ctests):
#   loaders  which loader honours OCL_ICD_VENDORS and OPENCL_LAYERS (clinfo -l, a layer run)
#   mpiexec  a short binary_policy.py run through the machine's mpiexec (OpenMPI), if time is left
#   probe    machine, driver, loader, pocl and Python facts
#   ctests   the C test programs on NVIDIA and on pocl, without the shim and under
#            preload pass/suppress/substitute and layer substitute; outputs, traces,
#            trace summaries, and a byte comparison of binary_roundtrip's saved binaries
#   bytes    query_timing on NVIDIA: the hash of the returned binary without the shim
#            (twice) and under every policy and mode; CLSHIM_DEVICES=all as a control
#   timing   query_timing on NVIDIA and pocl (4x300, 4x1, 1x1000 statements): no shim,
#            then shim pass with a trace folder, `clshim report` of each
#   pyocl    pyopencl (.whl) workload on NVIDIA and pocl under the shim, cold and warm
#   bench    bench/binary_policy.py (BENCH_RANKS, BENCH_N, BENCH_S, BENCH_REPEAT,
#            BENCH_LAUNCHER=procs|mpiexec) on pocl, within the time left
# Results go to $RES (default /tmp/res), packed into $OUT/res.tgz after every stage.
# DEADLINE (seconds from the start, default 560) bounds the bench stage.
set -uo pipefail
G="$PWD/.gpu"
RES="${RES:-/tmp/res}"
OUT="${OUT:-/tmp/out}"
mkdir -p "$RES" "$OUT"
T0=$(date +%s)
DEADLINE="${DEADLINE:-560}"
left() { echo $((DEADLINE - ($(date +%s) - T0))); }
save() { tar czf "$OUT/res.tgz" -C "$(dirname "$RES")" "$(basename "$RES")" 2>/dev/null; }
say() { echo "### [$(($(date +%s) - T0)) s] $*"; }
export PYTHONUNBUFFERED=1 CLSHIM_SUMMARY=1
unset LD_PRELOAD OPENCL_LAYERS CLSHIM_BINARIES CLSHIM_DEVICES CLSHIM_TRACE_DIR

# ---- set-up: ICD folders, loader, binaries, wheels
find_one() { for p in "$@"; do [ -e "$p" ] && { echo "$p"; return; }; done; }
NV=$(find_one /usr/lib/x86_64-linux-gnu/libnvidia-opencl.so.1 /usr/local/nvidia/lib64/libnvidia-opencl.so.1 /usr/lib64/libnvidia-opencl.so.1 /usr/local/nvidia/lib/libnvidia-opencl.so.1)
[ -n "$NV" ] || NV=$(timeout 60 find / \( -path /proc -o -path /sys \) -prune -o -name 'libnvidia-opencl.so.1' -print 2>/dev/null | head -1)
POCL=""
[ -f /etc/OpenCL/vendors/pocl.icd ] && POCL=$(head -1 /etc/OpenCL/vendors/pocl.icd)
[ -n "$POCL" ] || POCL=$(timeout 60 find / \( -path /proc -o -path /sys \) -prune -o -name 'libpocl.so.2*' -print 2>/dev/null | head -1)
mkdir -p /tmp/v/nv /tmp/v/pocl /tmp/v/both
[ -n "$NV" ] && echo "$NV" >/tmp/v/nv/nvidia.icd && cp /tmp/v/nv/nvidia.icd /tmp/v/both/
[ -n "$POCL" ] && echo "$POCL" >/tmp/v/pocl/pocl.icd && cp /tmp/v/pocl/pocl.icd /tmp/v/both/
if [ -n "$NV" ]; then  # the driver library's own folder, for libcuda and friends
    export LD_LIBRARY_PATH="$(dirname "$NV")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
BASE_LLP="${LD_LIBRARY_PATH:-}"
# use_loader KIND: which libOpenCL.so.1 the C programs resolve (LD_LIBRARY_PATH first)
#   ocl-icd  the machine's ocl-icd (Ubuntu's /lib/x86_64-linux-gnu/libOpenCL.so.1.0.0)
#   cuda     CUDA's libOpenCL.so.1 (/usr/local/cuda/targets/x86_64-linux/lib)
#   carried  Debian 12's ocl-icd 2.3.1 from .gpu/ocl
#   system   whatever ld.so.cache resolves first
use_loader() {
    LK=$1
    local dir=""
    case $1 in
        ocl-icd) if [ -e /lib/x86_64-linux-gnu/libOpenCL.so.1.0.0 ]; then
                     mkdir -p /tmp/ocl-icd && ln -sf /lib/x86_64-linux-gnu/libOpenCL.so.1.0.0 /tmp/ocl-icd/libOpenCL.so.1 && dir=/tmp/ocl-icd
                 else dir="$G/ocl/usr/lib/x86_64-linux-gnu"; LK=carried; fi ;;
        cuda) dir=/usr/local/cuda/targets/x86_64-linux/lib ;;
        carried) dir="$G/ocl/usr/lib/x86_64-linux-gnu" ;;
    esac
    export LD_LIBRARY_PATH="${dir:+$dir:}$BASE_LLP"
    LOADER="$LK: $(LD_TRACE_LOADED_OBJECTS=1 "$G/bin/query_timing" 2>/dev/null | grep libOpenCL | sed 's/.*=> //; s/ (0x.*//') -> $(readlink -f "$(LD_TRACE_LOADED_OBJECTS=1 "$G/bin/query_timing" 2>/dev/null | grep libOpenCL | sed 's/.*=> //; s/ (0x.*//')")"
    echo "loader: $LOADER"
}
use_loader "${LOADER_KIND:-ocl-icd}"
echo "setup: nvidia=$NV pocl=$POCL loader=$LOADER"
BIN="$G/bin"
if ! OCL_ICD_VENDORS=/tmp/v/pocl "$BIN/query_timing" --info --no-run --statements=1 >/tmp/bincheck 2>&1; then
    echo "setup: carried binaries failed: $(head -3 /tmp/bincheck); compiling here"
    BIN=/tmp/bin; mkdir -p $BIN
    lib=$(ldconfig -p | grep 'libOpenCL.so.1 ' | head -1 | sed 's/.*=> //')
    [ -n "$lib" ] || lib="$G/ocl/usr/lib/x86_64-linux-gnu/libOpenCL.so.1"
    for p in basic binary_roundtrip threads async_build compile_link query_timing; do
        cc -O1 -g -Wall -DCL_TARGET_OPENCL_VERSION=300 -I"$G/include" -o $BIN/$p "$G/src/$p.c" "$lib" -lpthread -ldl || echo "setup: cc $p failed"
    done
    cc -O1 -g -Wall -DCL_TARGET_OPENCL_VERSION=300 -I"$G/include" -o $BIN/dlopen_loader "$G/src/dlopen_loader.c" -ldl
fi
echo "setup: binaries from $BIN"
if ls .whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/tmp/pip.log 2>&1 \
        && echo "setup: wheels installed in /tmp/site" || { echo "setup: pip failed:"; tail -5 /tmp/pip.log; }
fi
PYSITE=/tmp/site
SHIM="$G/libclshim.so"
{ echo "nvidia_icd=$NV"; echo "pocl_icd=$POCL"; echo "loader=$LOADER"; echo "binaries=$BIN"; } >"$RES/setup.txt"

# runs one program: run_prog NAME PLAT MODE DIR -- cmd...   (MODE none|pass|suppress|substitute|layer-X|all-X)
run_prog() {
    local name=$1 plat=$2 mode=$3 dir=$4; shift 5
    mkdir -p "$dir/out"
    local cp=NVIDIA; [ $plat = pocl ] && cp=Portable
    local env=(OCL_ICD_VENDORS=/tmp/v/$plat CLTEST_PLATFORM=$cp POCL_CACHE_DIR=${PCDIR:-/tmp/pc/$dir/$plat-$mode-$name})
    case $mode in
        none|none2) ;;
        layer-*) env+=(OPENCL_LAYERS=$SHIM CLSHIM_BINARIES=${mode#layer-} CLSHIM_TRACE_DIR=$dir/traces/$plat-$mode-$name) ;;
        all-*) env+=(LD_PRELOAD=$SHIM CLSHIM_DEVICES=all CLSHIM_BINARIES=${mode#all-} CLSHIM_TRACE_DIR=$dir/traces/$plat-$mode-$name) ;;
        *) env+=(LD_PRELOAD=$SHIM CLSHIM_BINARIES=$mode CLSHIM_TRACE_DIR=$dir/traces/$plat-$mode-$name) ;;
    esac
    env "${env[@]}" timeout 120 "$@" >"$dir/out/$plat-$mode-$name.out" 2>"$dir/out/$plat-$mode-$name.err"
    echo $?
}

stage_probe() {
    say probe
    {
        date -u +%Y-%m-%dT%H:%M:%SZ; uname -a; nproc; grep -m1 'model name' /proc/cpuinfo
        lscpu 2>/dev/null | grep -E 'Thread|Core|Socket|MHz|NUMA node\(s\)'
        free -g | head -2; cat /etc/os-release | head -2; ldd --version | head -1
        nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
        echo "--- opencl"; ls -l /etc/OpenCL/vendors 2>&1; cat /etc/OpenCL/vendors/*.icd 2>&1
        ldconfig -p | grep -iE 'opencl|pocl'
        dpkg -l 2>/dev/null | grep -iE 'pocl|ocl-icd|opencl|mpich|openmpi' | awk '{print $2, $3}'
        which mpiexec mpirun clinfo cc gcc 2>&1
        timeout 60 find /usr /opt /lib /etc \( -name 'libpocl*' -o -name 'libnvidia-opencl*' -o -name 'libOpenCL*' \) -print 2>/dev/null | head -20
        echo "--- python"; python3 --version; python3 -m pip show numpy mpi4py 2>/dev/null | grep -E '^(Name|Version)'
        PYTHONPATH=$PYSITE OCL_ICD_VENDORS=/tmp/v/both python3 -c "import pyopencl as cl, numpy; print('pyopencl', cl.VERSION_TEXT, 'numpy', numpy.__version__); [print(' ', p.name, '|', p.version, '|', [d.name for d in p.get_devices()]) for p in cl.get_platforms()]" 2>&1 | tail -4
        echo "--- query_timing --info"
        for p in nv pocl; do OCL_ICD_VENDORS=/tmp/v/$p "$BIN/query_timing" --info --no-run --statements=1 2>&1; done
        echo "--- both platforms through one loader"
        OCL_ICD_VENDORS=/tmp/v/both "$BIN/query_timing" --info --no-run --statements=1 --platform=NVIDIA 2>&1 | head -1
        OCL_ICD_VENDORS=/tmp/v/both "$BIN/query_timing" --info --no-run --statements=1 --platform=Portable 2>&1 | head -1
        echo "--- shim"; ldd "$SHIM"; "$G/clshim" --version; cat "$G/BUILD_INFO"
        cat /proc/loadavg
    } >"$RES/probe.txt" 2>&1
    cat "$RES/probe.txt"
}

stage_loaders() {
    say loaders
    local keep=$LK
    {
        echo "CUDA loader: $(readlink -f /usr/local/cuda/targets/x86_64-linux/lib/libOpenCL.so.1)"
        strings /usr/local/cuda/targets/x86_64-linux/lib/libOpenCL.so.1 2>/dev/null | grep -E 'OCL_ICD|OPENCL_LAYERS|LAYER|/etc/OpenCL|vendors' | sort -u | head -20
        for k in cuda ocl-icd carried; do
            use_loader $k
            for v in nv pocl both; do
                echo "  OCL_ICD_VENDORS=/tmp/v/$v clinfo -l:"
                OCL_ICD_VENDORS=/tmp/v/$v timeout 60 clinfo -l 2>&1 | sed 's/^/    /'
            done
            rm -rf /tmp/lt-$k
            OCL_ICD_VENDORS=/tmp/v/pocl OPENCL_LAYERS=$SHIM CLSHIM_TRACE_DIR=/tmp/lt-$k CLSHIM_SUMMARY=0 timeout 60 "$BIN/query_timing" --platform=Portable --statements=1 --no-run >/dev/null 2>/tmp/lt-$k.err
            echo "  OPENCL_LAYERS=libclshim.so: $(ls /tmp/lt-$k 2>/dev/null | wc -l) trace file(s) (layer loaded if 1) $(head -c 300 /tmp/lt-$k.err)"
        done
    } 2>&1 | tee $RES/loaders.txt
    use_loader $keep
}

stage_mpiexec() {
    say "mpiexec check (time left $(left) s)"
    [ "$(left)" -gt 60 ] || { echo "skipped: too little time"; return; }
    OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OCL_ICD_VENDORS=/tmp/v/pocl PYTHONPATH=$PYSITE timeout $(( $(left) - 5 )) \
        python3 "$G/bench/binary_policy.py" --mpiexec "$(command -v mpiexec)" --python "$(command -v python3)" --shim "$SHIM" \
        --ranks 4 -n 2 -s 200 --configs a,b,c --out "$RES/mpiexec" 2>&1 | tee "$RES/mpiexec-stdout.txt"
}

stage_ctests() {
    say "ctests (loader $LOADER; platforms ${CT_PLATS:-nv pocl})"
    local D=$RES/ctests-$LK
    mkdir -p $D/bin
    echo "loader $LOADER" >$D/loader.txt
    local progs="basic binary_roundtrip dlopen_loader threads async_build compile_link"
    for plat in ${CT_PLATS:-nv pocl}; do
        for mode in none none2 pass suppress substitute layer-substitute; do
            for p in $progs; do
                local args=(--seed=11)
                [ $p = binary_roundtrip ] && args+=(--save=$D/bin/$plat-$mode.bin)
                rc=$(run_prog $p $plat $mode $D -- "$BIN/$p" "${args[@]}")
                same=no; cmp -s $D/out/$plat-$mode-$p.out $D/out/$plat-none-$p.out && same=yes
                echo "ctest plat=$plat mode=$mode prog=$p rc=$rc stdout_same_as_noshim=$same last=\"$(tail -1 $D/out/$plat-$mode-$p.out)\""
            done
        done
    done | tee $D/results.txt
    echo "--- binary_roundtrip saved binaries (fnv via cksum), per platform and mode" | tee -a $D/results.txt
    (cd $D/bin && for f in *.bin; do echo "$f $(stat -c %s $f) $(sha256sum <$f | cut -c1-16)"; done) | tee -a $D/results.txt
    echo "--- trace summaries" | tee -a $D/results.txt
    python3 "$G/bench/trace_summary.py" $D/traces/* 2>&1 | sed "s#$D/traces/##" | tee -a $D/results.txt
    echo "--- diffs against no shim" >>$D/results.txt
    for f in $D/out/*.out; do
        b=$(basename $f); base=$(echo $b | sed -E 's/^(nv|pocl)-[a-z0-9-]+-(.*)$/\1-none-\2/')
        [ "$b" = "$base" ] || { diff -u $D/out/$base $f >/dev/null || { echo "== $b"; diff $D/out/$base $f; }; }
    done >>$D/results.txt
    save
}

stage_bytes() {
    say "bytes (loader $LOADER)"
    local D=$RES/bytes-$LK
    mkdir -p $D
    for spec in "2 300" "1 1"; do
        set -- $spec
        for mode in none none2 pass suppress substitute layer-pass layer-suppress layer-substitute all-suppress all-substitute; do
            rc=$(run_prog q$1x$2 nv $mode $D -- "$BIN/query_timing" --platform=NVIDIA --kernels=$1 --statements=$2 --seed=42)
            echo "bytes mode=$mode rc=$rc $(grep -o 'kernel=[0-9]*\|size=[0-9]*\|hash=[^ ]*\|result=[a-zA-Z-]*' $D/out/nv-$mode-q$1x$2.out | tr '\n' ' ')"
        done
    done | tee $D/results.txt
    python3 "$G/bench/trace_summary.py" $D/traces/* 2>&1 | sed "s#$D/traces/##" | tee -a $D/results.txt
    save
}

stage_timing() {
    say timing
    local D=$RES/timing
    mkdir -p $D
    for plat in nv pocl; do
        local pf=NVIDIA; [ $plat = pocl ] && pf=Portable
        for spec in "4 300" "4 1" "1 1000"; do
            set -- $spec
            for mode in none pass; do
                rc=$(run_prog t$1x$2 $plat $mode $D -- "$BIN/query_timing" --platform=$pf --kernels=$1 --statements=$2 --seed=$RANDOM$RANDOM --info)
                echo "timing plat=$plat mode=$mode spec=$1x$2 rc=$rc"
                cat $D/out/$plat-$mode-t$1x$2.out
            done
        done
    done | tee $D/results.txt
    for t in $D/traces/*; do
        { echo "\$ clshim report $(basename $t)"; "$G/clshim" report "$t"; } >$D/report-$(basename $t).txt 2>&1
        "$G/clshim" report --json "$t" >$D/report-$(basename $t).json 2>/dev/null
    done
    cat $D/report-*.txt
    save
}

stage_pyocl() {
    say pyocl
    local D=$RES/pyocl
    mkdir -p $D
    for plat in nv pocl; do
        for run in cold warm; do
            rc=$(PYTHONPATH=$PYSITE XDG_CACHE_HOME=/tmp/xdg-$plat PCDIR=/tmp/pc-wl-$plat run_prog wl-$run $plat substitute $D -- python3 "$G/bench/workload.py" -n 2 -s 50)
            echo "pyocl plat=$plat run=$run rc=$rc $(cat $D/out/$plat-substitute-wl-$run.out) $(grep -c Warning $D/out/$plat-substitute-wl-$run.err) warnings"
        done
    done | tee $D/results.txt
    python3 "$G/bench/trace_summary.py" $D/traces/* 2>&1 | sed "s#$D/traces/##" | tee -a $D/results.txt
    save
}

stage_bench() {
    say "bench (time left $(left) s)"
    local launcher=${BENCH_LAUNCHER:-procs}
    local cmd=(python3 "$G/bench/binary_policy.py" --launcher "$launcher" --python "$(command -v python3)" --shim "$SHIM"
               --ranks "${BENCH_RANKS:-1,4,8,16}" -n "${BENCH_N:-4}" -s "${BENCH_S:-300}" --repeat "${BENCH_REPEAT:-1}" --out "$RES/bench")
    echo "\$ OCL_ICD_VENDORS=/tmp/v/pocl PYTHONPATH=$PYSITE ${cmd[*]}" | tee "$RES/bench-command.txt"
    cat /proc/loadavg
    OCL_ICD_VENDORS=/tmp/v/pocl PYTHONPATH=$PYSITE timeout "$(left)" "${cmd[@]}" 2>&1 | tee "$RES/bench-stdout.txt"
    cat /proc/loadavg
    save
}

for s in "$@"; do
    case $s in
        loader=*) use_loader "${s#loader=}" ;;          # switch loader for the stages after it
        plats=*) CT_PLATS="${s#plats=}"; CT_PLATS="${CT_PLATS//,/ }" ;;  # ctests platforms
        *) "stage_$s"; save ;;
    esac
done
say done
