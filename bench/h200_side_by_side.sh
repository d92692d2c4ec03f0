#!/usr/bin/env bash
# Session 18 (issue 33) on the lent H200: the viewer and its serve (this tree, and OLD=DIR, an earlier tree's amdtop/,
# tui/, widgets/ from `git archive REV amdtop tui widgets`) against the in-process dashboard twice over (the second
# copy shows how far two identical programs read apart), all run AT THE SAME TIME over the same windows
# (bench/side_by_side.py), idle, then busy (bench/gpu_load.py: a bf16 matmul loop on 8 GiB and a second CUDA process).
# Wheels in tmp/whl (textual, rich, ... as in bench/h200_session12_run.sh).
#   usage: OLD=tmp/old W=8 SECS=20 STEPS="idle busy" [FLIP=1] bash bench/h200_side_by_side.sh
set -u
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site tmp/whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD
LOG=$OUT/log.txt C=/tmp/none.toml
touch $C
{ nvidia-smi --query-gpu=name,driver_version,memory.used,utilization.gpu --format=csv; python3 -c 'import sys,textual; print(sys.version, textual.__version__)'; nproc; uptime; } >>$LOG 2>&1
sbs() {  # sbs STEP PORT
  echo "=== $1 ($(date +%T))" | tee -a $LOG
  local serve="--backend nvml --config $C --interval 1" inproc="python3 -m tui --no-attach --readonly --backend nvml --interval 1 --config $C"
  local runs=(--run in-process nvml "$inproc --state-dir /tmp/i1-$1"
    --run in-process-2 nvml "$inproc --state-dir /tmp/i2-$1"
    --run viewer+serve attached "bash bench/serve_pair.sh /tmp/p-$1 127.0.0.1:$2 $serve"
    --run viewer+serve-old attached "env PYTHONPATH=/tmp/site:$PWD/$OLD SERVE='python3 -P -m amdtop serve' VIEWER='python3 -P -m tui' bash bench/serve_pair.sh /tmp/o-$1 127.0.0.1:$(($2 + 1)) $serve")
  # FLIP=1: the pairs start first and the in-process copies last (the program started first reads a few % higher).
  [ "${FLIP:-0}" = 1 ] && runs=("${runs[@]:8:4}" "${runs[@]:0:4}" "${runs[@]:12:4}" "${runs[@]:4:4}")
  python3 bench/side_by_side.py --windows "${W:-8}" --seconds "${SECS:-20}" --json "${runs[@]}" \
    2>>$LOG | tee $OUT/sbs_$1.json | tee -a $LOG
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
