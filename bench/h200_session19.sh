#!/usr/bin/env bash
# Session 19 (issue 33) on the lent H200: this tree's in-process dashboard and viewer + serve against an earlier
# tree's two (OLD=DIR: `git archive REV amdtop tui widgets`), all four AT THE SAME TIME over the same windows
# (bench/side_by_side.py --threads: each program's CPU, and per process its main thread and the rest), idle, then
# busy (bench/gpu_load.py: a bf16 matmul loop on 8 GiB and a second CUDA process). The program started first reads a
# few % higher: ORDER=A starts the in-process dashboards first, ORDER=B the pairs; run both.
# Wheels in tmp/whl (textual, rich, ... as in bench/h200_session12_run.sh).
#   usage: OLD=tmp/old ORDER=A W=6 SECS=20 STEPS="idle busy" bash bench/h200_session19.sh
set -u
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site tmp/whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD
LOG=$OUT/log_${ORDER:-A}.txt C=/tmp/none.toml
touch $C
{ nvidia-smi --query-gpu=name,driver_version,memory.used,utilization.gpu --format=csv; python3 -c 'import sys,textual; print(sys.version, textual.__version__)'; nproc; uptime; } >>$LOG 2>&1
sbs() {  # sbs STEP PORT
  echo "=== $1 order ${ORDER:-A} ($(date +%T))" | tee -a $LOG
  local serve="--backend nvml --config $C --interval 1" inproc="--no-attach --readonly --backend nvml --interval 1 --config $C"
  local old="env PYTHONPATH=/tmp/site:$PWD/$OLD"
  local a=(--run in-process nvml "python3 -m tui $inproc --state-dir /tmp/i1-$1")
  local b=(--run viewer+serve attached "bash bench/serve_pair.sh /tmp/p-$1 127.0.0.1:$2 $serve")
  local c=(--run in-process-old nvml "$old python3 -P -m tui $inproc --state-dir /tmp/i2-$1")
  local d=(--run viewer+serve-old attached "$old SERVE='python3 -P -m amdtop serve' VIEWER='python3 -P -m tui' bash bench/serve_pair.sh /tmp/o-$1 127.0.0.1:$(($2 + 1)) $serve")
  local runs=("${a[@]}" "${b[@]}" "${c[@]}" "${d[@]}")
  [ "${ORDER:-A}" = B ] && runs=("${b[@]}" "${a[@]}" "${d[@]}" "${c[@]}")
  python3 bench/side_by_side.py --windows "${W:-6}" --seconds "${SECS:-20}" --threads --json "${runs[@]}" \
    2>>$LOG | tee $OUT/sbs_$1_${ORDER:-A}.json | tee -a $LOG
}
[[ " ${STEPS:-idle busy} " == *" idle "* ]] && sbs idle 19420
if [[ " ${STEPS:-idle busy} " == *" busy "* ]]; then
  python3 bench/gpu_load.py --gib 8 --n 8192 --seconds 400 & L1=$!
  python3 bench/gpu_load.py --gib 1 --n 2048 --seconds 400 --pause 0.05 & L2=$!
  sleep 12
  sbs busy 19430
  kill $L1 $L2 2>/dev/null; wait
fi
echo "=== done ($(date +%T))" | tee -a $LOG
