#!/usr/bin/env bash
# Everything the GPU engineer measures on the lent H200 machine in one call (see docs/benchmarks.md).
# usage (device run): bash bench/h200_run.sh capture|tui    -> results under $OUT
set -u
MODE=${1:-capture}
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD
R=/tmp/res; rm -rf $R; mkdir -p $R/nvml $R/nccl $R/probe $R/bench $R/state
LOG=$OUT/log.txt
step() { echo "=== $* ($(date +%T))" | tee -a $LOG; }

step info
{ nvidia-smi; nvidia-smi topo -m; python3 -c 'import sys,torch,pynvml; print(sys.version); print("torch", torch.__version__, torch.cuda.device_count(), "nccl", torch.cuda.nccl.version())'; python3 -m pip show nvidia-ml-py | head -2; nproc; } >>$LOG 2>&1

if [ "$MODE" = capture ]; then
  step load-start
  python3 -c '
import torch, time
x = torch.empty(8 << 30, dtype=torch.uint8, device="cuda")
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
t = time.time()
while time.time() - t < 25:
    a @ a
    torch.cuda.synchronize()
' & LOADPID=$!
  sleep 8
  step nvml-record
  python3 -m amdtop.telemetry.nvml_replay record --out $R/nvml/h200_replay.json --polls 3 >>$LOG 2>&1
  step snapshot
  python3 -m amdtop snapshot --json --backend nvml > $R/nvml/h200_snapshot.json 2>>$LOG; echo "rc=$?" >>$LOG
  python3 -m amdtop snapshot --backend nvml >>$LOG 2>&1
  python3 -m amdtop topo --json --backend nvml > $R/nvml/h200_topo.json 2>>$LOG
  python3 -m amdtop topo --backend nvml > $R/nvml/h200_topo.txt 2>>$LOG; cat $R/nvml/h200_topo.txt >>$LOG
  step probe-refuses-busy
  python3 -m amdtop probe --backend nvml --gpus 0 --state-dir $R/state >>$LOG 2>&1; echo "rc=$? (expect 2)" >>$LOG
  wait $LOADPID
  step poll-bench
  python3 bench/poll_nvml.py --rounds 21 --polls 200 --json $R/bench/poll_nvml.json 2>&1 | tee -a $LOG
  step nccl
  for spec in "0:h200-1rank:" "0:h200-1rank-p2pdisable:NCCL_P2P_DISABLE=1" "0,0:h200-2rank-same-gpu:"; do
    IFS=: read -r devs tag extra <<<"$spec"
    env NCCL_DEBUG=INFO $extra timeout 120 python3 bench/nccl_allreduce.py --devices $devs --logdir $R/nccl --tag $tag > $R/nccl/$tag.stdout.log 2>&1
    echo "$tag rc=$?" | tee -a $LOG; tail -3 $R/nccl/$tag.stdout.log >>$LOG
  done
  step probe
  for i in 1 2; do
    timeout 200 python3 -m amdtop probe --backend nvml --gpus 0 --json --state-dir $R/state > $R/probe/amdtop_probe_$i.json 2>>$LOG; echo "amdtop probe rc=$?" >>$LOG
    timeout 200 python3 bench/probe_reference.py --gpus 0 --json $R/probe/reference_$i.json --compare $R/probe/amdtop_probe_$i.json 2>&1 | tee -a $LOG
  done
  python3 -m amdtop probe --backend nvml --gpus 0 --sizes 16M --state-dir $R/state >>$LOG 2>&1
  cp $R/state/probe.json $R/probe/state_probe.json 2>/dev/null
fi

if [ "$MODE" = final ]; then
  # Second run: re-record under load (now with the single GPU's NVLink answers), poll cost busy and idle.
  step load-start
  python3 -c '
import torch, time
x = torch.empty(8 << 30, dtype=torch.uint8, device="cuda")
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
t = time.time()
while time.time() - t < 30:
    a @ a
    torch.cuda.synchronize()
' & LOADPID=$!
  sleep 8
  step nvml-record
  python3 -m amdtop.telemetry.nvml_replay record --out $R/nvml/h200_replay.json --polls 3 >>$LOG 2>&1
  python3 -m amdtop snapshot --json --backend nvml > $R/nvml/h200_snapshot.json 2>>$LOG; echo "rc=$?" >>$LOG
  python3 -m amdtop topo --json --backend nvml > $R/nvml/h200_topo.json 2>>$LOG
  python3 -m amdtop topo --backend nvml > $R/nvml/h200_topo.txt 2>>$LOG
  step poll-bench-busy
  python3 bench/poll_nvml.py --rounds 21 --polls 200 --json $R/bench/poll_nvml_busy.json 2>&1 | tee -a $LOG
  wait $LOADPID
  step poll-bench-idle
  python3 bench/poll_nvml.py --rounds 21 --polls 200 --json $R/bench/poll_nvml_idle.json 2>&1 | tee -a $LOG
fi

if [ "$MODE" = tui ] || [ "$MODE" = final ] || [ -f tui/launch.py ]; then
  step tui-cpu
  SECS=${TUI_SECONDS:-60}
  # Two interleaved rounds: CPU and tty bytes/s of amdtop and nvitop on the same GPU, size and interval.
  python3 bench/tui_cpu.py --runs 2 --seconds $SECS --marker nvml --save $R/bench --markdown \
    --peer 'python3 -m nvitop --interval 1' --peer-marker H200 \
    -- python3 -m tui --backend nvml --interval 1 2>>$R/bench/tui_cpu.jsonl | tee -a $LOG
fi
step pack
tar -C $R -czf $OUT/results.tgz . && ls -la $OUT >>$LOG
