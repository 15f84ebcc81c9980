#!/bin/bash
# v2 (bin-v2, state-v2, logs-v2); usage: v2-run-config.sh CONFIG SUITE [SUBTEST...]
# CONFIG: a | b | c | d | e ; SUITE: compiler | api
set -u
CONFIG=$1; SUITE=$2; shift 2
R=/work/cts
L=$R/bin-v2/libclshim.so
STATE=${STATE:-$R/state-v2}
STORE=${STORE:-$STATE/store-pc}          # store of the program-cache family (b)-(e)
# c2, d2, e2: (c), (d), (e) again on a second store (STORE=...), a kernel cache of their own
BASE=${CONFIG:0:1}
case $SUITE in
  compiler) BIN=./test_compiler; DIR=$R/build/test_conformance/compiler; T=300;;
  api)      BIN=./test_api;      DIR=$R/build/test_conformance/api;      T=180;;
esac
LIST=$R/$SUITE.list
if [ $# -gt 0 ]; then TESTS="$*"; else TESTS=$(cat $LIST); fi
LOGDIR=${LOGDIR:-${LOGDIR_BASE:-$R/logs-v2}/$CONFIG/$SUITE}
mkdir -p $LOGDIR
# each configuration: its own pocl kernel cache and HOME; (c) shares (b)'s kernel cache;
# (d) and (e) use copies of (b)'s kernel cache taken right after the warm step
KC=$STATE/kc-$CONFIG-$SUITE; H=$STATE/home-$CONFIG
[ $CONFIG = c ] && KC=$STATE/kc-b-$SUITE
mkdir -p $KC $H
cd $DIR
for t in $TESTS; do
  ENVV=(CL_DEVICE_TYPE=CL_DEVICE_TYPE_CPU POCL_CACHE_DIR=$KC HOME=$H)
  case $BASE in
    a) ;;
    b) ENVV+=(LD_PRELOAD=$L OPENCL_LAYERS=$L CLSHIM_PROGRAM_CACHE=1 CLSHIM_WARM=1 CLSHIM_NATIVE_STORE=$STORE);;
    c) ENVV+=(LD_PRELOAD=$L OPENCL_LAYERS=$L CLSHIM_PROGRAM_CACHE=1 CLSHIM_NATIVE_STORE=$STORE CLSHIM_TRACE_DIR=${TRACES:-$R/logs-v2/traces}/$CONFIG/$SUITE/$t);;
    d) ENVV+=(LD_PRELOAD=$L CLSHIM_PROGRAM_CACHE=1 CLSHIM_NATIVE_STORE=$STORE CLSHIM_TRACE_DIR=${TRACES:-$R/logs-v2/traces}/$CONFIG/$SUITE/$t);;
    e) ENVV+=(OPENCL_LAYERS=$L CLSHIM_PROGRAM_CACHE=1 CLSHIM_NATIVE_STORE=$STORE CLSHIM_TRACE_DIR=${TRACES:-$R/logs-v2/traces}/$CONFIG/$SUITE/$t);;
  esac
  case $BASE in c|d|e) mkdir -p ${TRACES:-$R/logs-v2/traces}/$CONFIG/$SUITE/$t;; esac
  s=$(date +%s.%N)
  env "${ENVV[@]}" timeout -k 10 $T $BIN $t > $LOGDIR/$t.log 2>&1
  rc=$?
  e=$(date +%s.%N)
  printf '%s %d %.1f\n' $t $rc $(echo "$e - $s" | bc) >> $LOGDIR/rc.txt
done
