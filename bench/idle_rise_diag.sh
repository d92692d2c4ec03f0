#!/usr/bin/env bash
# Issue 53 (session 21): where the in-process dashboard's idle CPU goes on a lent NVIDIA card, against the floor and
# nvitop in the same windows. Steps (STEPS, default "sbs prof calls"):
#   sbs:   bench/side_by_side.py --threads --pin: the in-process dashboard, the bare Textual clock
#          (bench/textual_floor.py) and nvitop, all at once, idle GPU.
#   prof:  60 s of py-spy samples (non-idle) of the in-process dashboard, idle (where the ticks go, per thread).
#   calls: bench/nvml_call_cost.py: each NVML call the backend makes, timed on this card.
# Wheels in tmp/whl (textual, rich, nvitop, py-spy... for the device's Python 3.12).
#   usage: W=6 SECS=20 STEPS="sbs prof calls" bash bench/idle_rise_diag.sh
set -u
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site tmp/whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD
LOG=$OUT/log.txt C=/tmp/none.toml
touch $C
want() { [[ " ${STEPS:-sbs prof calls} " == *" $1 "* ]]; }
step() { echo "=== $* ($(date +%T))" | tee -a $LOG; }
{ nvidia-smi --query-gpu=name,driver_version,memory.used,utilization.gpu --format=csv; nvidia-smi -q | grep -i -E 'persistence|MIG mode' ; python3 -c 'import sys,textual; print(sys.version, textual.__version__)'; nproc; uptime; } >>$LOG 2>&1
inproc="python3 -m tui --no-attach --readonly --backend nvml --interval 1 --state-dir /tmp/i1 --config $C"
if want sbs; then
  step sbs-idle
  python3 bench/side_by_side.py --windows "${W:-6}" --seconds "${SECS:-20}" --threads --json --pin "${PIN:-1,3,5,7}" \
    --run in-process nvml "$inproc" \
    --run floor backend "python3 bench/textual_floor.py" \
    --run nvitop NVIDIA "python3 -m nvitop --interval 1" 2>>$LOG | tee $OUT/sbs_idle.json | tee -a $LOG
fi
if want prof; then
  step prof-idle
  python3 bench/tui_cpu.py --runs 1 --seconds 75 --warmup 2 --marker nvml --label inproc-idle -- $inproc 2>>$OUT/prof_cpu.jsonl >/dev/null &
  T=$!; sleep 10
  p=$(pgrep -f "^$inproc" | head -1)
  [ -n "$p" ] && /tmp/site/bin/py-spy record -r 200 -d 60 -f raw -n --threads -o $OUT/prof_idle.raw -p $p >>$LOG 2>&1
  wait $T
  cat $OUT/prof_cpu.jsonl >>$LOG
fi
if want calls; then
  step nvml-calls
  timeout 120 python3 bench/nvml_call_cost.py >$OUT/nvml_calls.txt 2>&1; tail -40 $OUT/nvml_calls.txt >>$LOG
fi
step done
