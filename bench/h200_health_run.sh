#!/usr/bin/env bash
# Throttle (clock-event) reasons, violation counters, ECC and NVLink counters read live on the lent H200, one call.
# usage (device run, from a copy of this tree): bash bench/h200_health_run.sh   -> results under $OUT
set -u
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONPATH=$PWD
LOG=$OUT/log.txt
step() { echo "=== $* ($(date +%T))" | tee -a $LOG; }
step info
{ nvidia-smi; nvidia-smi -q -d PERFORMANCE,ECC,POWER; python3 -m pip show nvidia-ml-py | head -2; } >>$LOG 2>&1
step idle-record
python3 -m amdtop.telemetry.nvml_replay record --out $OUT/h200_health_idle_replay.json --polls 3 --interval 0.5 >>$LOG 2>&1
step load-start
python3 -c '
import torch, time
a = torch.randn(16384, 16384, device="cuda", dtype=torch.bfloat16)
t = time.time()
while time.time() - t < 30:
    for _ in range(20):
        a @ a
    torch.cuda.synchronize()
' & LOADPID=$!
sleep 6
if [ "${TRACE:-0}" = 1 ]; then
  step trace
  python3 bench/nvml_throttle_trace.py --seconds 20 --interval 0.5 --out $OUT/h200_throttle_trace.jsonl 2>&1 | tail -5 | tee -a $LOG
fi
step load-record
python3 -m amdtop.telemetry.nvml_replay record --out $OUT/h200_health_replay.json --polls 11 --interval 1.0 >>$LOG 2>&1
wait $LOADPID
step after-load
nvidia-smi -q -d PERFORMANCE >>$LOG 2>&1
step poll-bench
python3 bench/poll_nvml.py --rounds 11 --polls 100 --json $OUT/h200_poll_nvml_health.json 2>&1 | tail -5 | tee -a $LOG
step call-cost
python3 bench/nvml_call_cost.py --n 300 --json $OUT/h200_nvml_call_cost.json 2>&1 | tee -a $LOG
ls -la $OUT >>$LOG
