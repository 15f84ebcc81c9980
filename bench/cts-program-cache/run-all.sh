#!/bin/bash
# v2: the rerun with bin-v2 into state-v2 and logs-v2. the whole run, in order: (a), (b), warm, then (c), (d), (e); both suites each
set -u
R=/work/cts; cd $R
STATE=$R/state-v2; STORE=$STATE/store-pc; LOGS=$R/logs-v2
export STATE STORE LOGDIR_BASE=$LOGS TRACES=$LOGS/traces
mkdir -p $LOGS
stamp() { echo "$(date -u +%FT%TZ) $*" >> $LOGS/run-all.log; }
for cfg in a b; do for s in compiler api; do stamp start $cfg $s; scripts/v2-run-config.sh $cfg $s; stamp end $cfg $s; done; done
ls $STORE/requests | wc -l > $LOGS/requests-before-warm.txt
ls -la $STORE/requests > $LOGS/requests-before-warm.ls  # v2: the names too
stamp warm start
( time bin-v2/clshim warm --lib $R/bin-v2/libclshim.so --store $STORE ) > $LOGS/warm.log 2>&1
echo "rc=$?" >> $LOGS/warm.log
stamp warm end
ls -la $STORE/requests > $LOGS/requests-after-warm.ls  # v2: what the warm step left
(cd $STORE && find . -type f | sort | xargs sha256sum) > $LOGS/store-after-warm.sha256
for s in compiler api; do for cfg in d e; do rm -rf $STATE/kc-$cfg-$s; cp -a $STATE/kc-b-$s $STATE/kc-$cfg-$s; done; done
for cfg in c d e; do for s in compiler api; do stamp start $cfg $s; scripts/v2-run-config.sh $cfg $s; stamp end $cfg $s; done; done
(cd $STORE && find . -type f | sort | xargs sha256sum) > $LOGS/store-after-cde.sha256
stamp done
