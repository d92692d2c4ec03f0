#!/usr/bin/env bash
# On nvidia-h200-x2 (or x4): a torch NCCL job launched as an amdtop worker, one rank loaded more than the other;
# amdtop's nvml snapshots must flag tp_imbalance in phase 1 and not in phase 2; its NCCL logs parsed.
set -u
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD
N=$(nvidia-smi -L | wc -l); GPUS=$(python3 -c "print(list(range($N)))")
R=/tmp/imb; rm -rf $R; mkdir -p $R/nccl
cat > $R/workers.toml <<TOML
[[worker]]
name = "tpjob"
model = "job"
gpus = $GPUS
numa_node = "none"
port = 18500
command = ["python3", "$PWD/bench/imbalance_job.py"]
[worker.args]
phase1 = 30
phase2 = 35
[worker.env]
NCCL_DEBUG = "INFO"
NCCL_DEBUG_FILE = "$R/nccl/tpjob.%h.%p.log"
PYTHONPATH = "/tmp/site:$PWD"
NCCL_NVLS_ENABLE = "0"
TOML
A="python3 -m amdtop --backend nvml --config $R/workers.toml --state-dir $R/state"
$A workers launch tpjob 2>&1 | tee $R/log.txt
sleep 14
$A snapshot --json --window 8 > $R/phase1.json 2>>$R/log.txt
sleep 18
$A snapshot --json --window 8 > $R/phase2.json 2>>$R/log.txt
sleep 12
$A workers status >> $R/log.txt 2>&1
$A workers stop tpjob --grace 10 >> $R/log.txt 2>&1
cat $R/state/logs/tpjob.log >> $R/log.txt 2>/dev/null
python3 -m amdtop logs parse $R/nccl/*.log >> $R/log.txt 2>&1
python3 -m amdtop logs parse --json $R/nccl/*.log > $R/logs_parse.json 2>>$R/log.txt
for f in phase1 phase2; do python3 -c "
import json,sys; d=json.load(open('$R/$f.json'))
print('$f', [(w['name'], w['state'], w['gpus']) for w in d['workers']], [(x['kind'], x.get('metric'), x.get('spread_pct')) for x in d['flags']], [g['util_pct'] for g in d['gpus']])" | tee -a $R/log.txt; done
cd /tmp && tar czf $OUT/imb.tar.gz imb && cp $R/log.txt $OUT/log.txt
