#!/usr/bin/env bash
# Issue 28 on the lent H200, one call: an NVML capture with two CUDA processes (a busy torch job and a second one
# that ignores SIGTERM), snapshot --json rows, the per-tick cost of 64 process rows, amdtop's dashboard (Processes
# pane shown) against nvitop on the busy GPU, then TERM and KILL of the second process through the pane's core.
# usage (device run, from a copy of this tree holding .whl/): bash bench/h200_procs_run.sh   -> results under $OUT
set -u
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD
R=/tmp/res; rm -rf $R; mkdir -p $R/tui
LOG=$OUT/log.txt
step() { echo "=== $* ($(date +%T))" | tee -a $LOG; }
# STEPS picks the parts to run (all by default).
want() { [[ " ${STEPS:-record snapshot rows tui signal} " == *" $1 "* ]]; }
step info
{ nvidia-smi; python3 -c 'import sys,torch,psutil,textual; print(sys.version, torch.__version__, psutil.__version__, textual.__version__)'; nproc; } >>$LOG 2>&1
step load-start
python3 -c '
import os, torch, time
x = torch.empty(8 << 30, dtype=torch.uint8, device="cuda")
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
t = time.time()
while time.time() - t < float(os.environ.get("LOAD_S", "330")):
    a @ a
    torch.cuda.synchronize()
' & LOADPID=$!
python3 -c '
import os, signal, time, torch
signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the process TERM cannot stop: the pane then offers KILL
y = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
b = torch.randn(2048, 2048, device="cuda")
t = time.time()
while time.time() - t < float(os.environ.get("LOAD_S", "330")):
    b @ b
    torch.cuda.synchronize()
    time.sleep(0.05)
' & SECONDPID=$!
sleep 12
want record && step nvml-record
want record && python3 -m amdtop.telemetry.nvml_replay record --out $R/h200_procs_replay.json --polls 6 --interval 1.0 >>$LOG 2>&1
if want snapshot; then
step snapshot
python3 -m amdtop snapshot --json --backend nvml --window 2 --interval 1 > $R/h200_procs_snapshot.json 2>>$LOG; echo "rc=$?" >>$LOG
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(json.dumps(d["gpus"][0]["processes"], indent=1)); print(d["gpus"][0].get("processes_vram"))' $R/h200_procs_snapshot.json >>$LOG 2>&1
fi
want rows && step rows-bench
want rows && python3 bench/gpu_procs.py --procs 64 --ticks 200 --rounds 5 --json $R/gpu_procs_bench.json 2>&1 | tail -8 | tee -a $LOG
if want tui; then
step tui-cpu
python3 bench/tui_cpu.py --runs 2 --seconds ${TUI_SECONDS:-40} --marker nvml --save $R/tui --markdown \
  --peer 'python3 -m nvitop --interval 1' --peer-marker H200 \
  -- python3 -m tui --backend nvml --interval 1 2>>$R/tui_cpu.jsonl | tee -a $LOG
fi
if want signal; then
step signal
python3 bench/gpu_procs_signal.py --pid $SECONDPID > $R/signal.json 2>>$LOG; cat $R/signal.json >>$LOG
fi
kill $LOADPID $SECONDPID 2>/dev/null; wait
step pack
tar -C $R -czf $OUT/results.tgz . && ls -la $R $R/tui >>$LOG
