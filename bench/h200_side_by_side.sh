#!/usr/bin/env bash
# Issue 33 on the lent H200: the viewer and its serve (this tree, and OLD=DIR, an earlier tree's amdtop/, tui/,
# widgets/ from `git archive REV amdtop tui widgets`) against the in-process dashboard, all run AT THE SAME TIME over
# the same windows (bench/side_by_side.py --threads: also per process, main thread and the rest), idle, then busy
# (bench/gpu_load.py: a bf16 matmul loop on 8 GiB and a second CUDA process).
# SET=twins (session 18): the in-process dashboard twice (how far two identical programs read apart) beside the two
# pairs; SET=old (session 19): the earlier tree's in-process dashboard in place of the second copy.
# The program started first reads a few % higher: FLIP=1 starts the pairs first and the in-process ones last.
# PIN=CPUS (session 20): side_by_side.py --pin (the harness on the first CPU, each program on the next); the busy
# step's GPU load then runs on LOADCPUS (default 10-15), off the programs' CPUs.
# Wheels in tmp/whl (textual, rich, ... as in bench/h200_session12_run.sh).
#   usage: OLD=tmp/old W=8 SECS=20 STEPS="idle busy" [SET=old] [FLIP=1] [PIN=0,2,4,6,8] bash bench/h200_side_by_side.sh
set -u
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site tmp/whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD
TAG=${SET:-twins}-${FLIP:-0}${PIN:+-pin} LOG=$OUT/log.txt C=/tmp/none.toml
PINARG=() LOADPIN=()
[ -n "${PIN:-}" ] && PINARG=(--pin "$PIN") && command -v taskset >/dev/null && LOADPIN=(taskset -c "${LOADCPUS:-10-15}")
touch $C
{ nvidia-smi --query-gpu=name,driver_version,memory.used,utilization.gpu --format=csv; python3 -c 'import sys,textual; print(sys.version, textual.__version__)'; nproc; uptime; } >>$LOG 2>&1
sbs() {  # sbs STEP PORT
  echo "=== $1 $TAG ($(date +%T))" | tee -a $LOG
  local serve="--backend nvml --config $C --interval 1" inproc="python3 -m tui --no-attach --readonly --backend nvml --interval 1 --config $C"
  local old="env PYTHONPATH=/tmp/site:$PWD/$OLD"
  local first=(--run in-process nvml "$inproc --state-dir /tmp/i1-$1")
  local second=(--run in-process-2 nvml "$inproc --state-dir /tmp/i2-$1")
  [ "${SET:-twins}" = old ] && second=(--run in-process-old nvml "$old python3 -P -m tui ${inproc#python3 -m tui } --state-dir /tmp/i2-$1")
  local pairs=(--run viewer+serve attached "bash bench/serve_pair.sh /tmp/p-$1 127.0.0.1:$2 $serve"
    --run viewer+serve-old attached "$old SERVE='python3 -P -m amdtop serve' VIEWER='python3 -P -m tui' bash bench/serve_pair.sh /tmp/o-$1 127.0.0.1:$(($2 + 1)) $serve")
  local runs=("${first[@]}" "${second[@]}" "${pairs[@]}")
  [ "${FLIP:-0}" = 1 ] && runs=("${pairs[@]}" "${first[@]}" "${second[@]}")
  python3 bench/side_by_side.py --windows "${W:-8}" --seconds "${SECS:-20}" --threads --json "${PINARG[@]}" "${runs[@]}" \
    2>>$LOG | tee $OUT/sbs_$1_$TAG.json | tee -a $LOG
}
[[ " ${STEPS:-idle busy} " == *" idle "* ]] && sbs idle 19420
if [[ " ${STEPS:-idle busy} " == *" busy "* ]]; then
  "${LOADPIN[@]}" python3 bench/gpu_load.py --gib 8 --n 8192 --seconds 400 & L1=$!
  "${LOADPIN[@]}" python3 bench/gpu_load.py --gib 1 --n 2048 --seconds 400 --pause 0.05 & L2=$!
  sleep 12
  sbs busy 19430
  kill $L1 $L2 2>/dev/null; wait
fi
echo "=== done ($(date +%T))" | tee -a $LOG
