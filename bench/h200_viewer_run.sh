#!/usr/bin/env bash
# Issue 25 (and the session-10 re-measures of 27 and 28) on the lent H200, one call: an attached viewer of
# `amdtop serve --backend nvml` against nvitop and against the in-process dashboard (CPU, RSS, terminal bytes; idle,
# then busy with a torch job and a second CUDA process), the serve's own CPU over the same windows, frame latency with
# 1 and 5 viewers, the process rows per tick and the live RCCL tail.
# usage (device run, wheels in tmp/whl, baseline in tmp/base): STEPS="procs tail latency viewer" bash bench/h200_viewer_run.sh
# (STEPS "idle" or "busy" run one half of "viewer": a 600 s device call holds one half at RUNS=3 SECS=30.)
set -u
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site tmp/whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD
LOG=$OUT/log.txt
step() { echo "=== $* ($(date +%T))" | tee -a $LOG; }
want() { [[ " ${STEPS:-procs latency viewer} " == *" $1 "* ]]; }
ticks() { awk '{print $14+$15}' /proc/$1/stat; }
step info
{ nvidia-smi --query-gpu=name,memory.used,utilization.gpu --format=csv; python3 -c 'import sys,textual,psutil; print(sys.version, textual.__version__, psutil.__version__)'; nproc; uptime; git log --oneline -1 2>/dev/null; } >>$LOG 2>&1
if want pages; then
  step pages
  python3 bench/page_touch.py 2>&1 | tail -3 | tee -a $LOG
fi
if want procs; then
  step procs
  python3 bench/gpu_procs.py --procs 64 --ticks 200 --rounds 5 --json $OUT/gpu_procs.json 2>&1 | tail -6 | tee -a $LOG
fi
if want tail; then
  step tail
  python3 bench/tail_rate.py --mb 20 --runs ${TAIL_RUNS:-5} --chunk-mb 4 --baseline-dir tmp/base 2>&1 | tail -30 | tee -a $LOG
fi
if want latency; then
  step latency
  python3 bench/serve_viewers.py --interval 0.5 --seconds ${LAT_SECS:-20} --no-tui > $OUT/serve_viewers.json 2>>$LOG; cat $OUT/serve_viewers.json >>$LOG
fi
if want viewer || want idle || want busy; then
  S=/tmp/serve-state; C=/tmp/none.toml
  python3 -m amdtop serve --backend nvml --interval 1 --state-dir $S --config $C --listen 127.0.0.1:19400 >$OUT/serve.log 2>&1 &
  SERVE=$!
  PREV_PEER=() INPROC_PEER=(--peer "python3 -m tui --no-attach --readonly --backend nvml --interval 1 --state-dir /tmp/inproc --config $C"
    --peer-marker nvml --peer-label in-process)
  [ "${INPROC:-1}" = 0 ] && INPROC_PEER=()  # INPROC=0: viewer and nvitop only (a short device call)
  if [ -d tmp/prev ] && [ "${PREV:-1}" != 0 ]; then
    # The previous tree (its serve and its viewer, wire versions differ) measured in the same run: new / previous.
    (cd tmp/prev && PYTHONPATH=/tmp/site exec python3 -m amdtop serve --backend nvml --interval 1 --state-dir /tmp/prev-state \
      --config $C --listen 127.0.0.1:19401 >$OUT/serve_prev.log 2>&1) &
    PREVSERVE=$!
    PREV_PEER=(--peer "env -C $PWD/tmp/prev PYTHONPATH=/tmp/site python3 -m tui --state-dir /tmp/prev-state --config $C --interval 1"
      --peer-marker nvml --peer-label previous)
  fi
  sleep 6
  viewer() {
    local t0; t0=$(ticks $SERVE); local w0; w0=$(date +%s.%N)
    python3 bench/tui_cpu.py --runs ${RUNS:-2} --seconds ${SECS:-20} --marker nvml --save $OUT/screens_$1 --markdown \
      --peer 'python3 -m nvitop --interval 1' --peer-marker H200 --peer-label nvitop \
      "${INPROC_PEER[@]}" "${PREV_PEER[@]}" \
      --label viewer -- python3 -m tui --state-dir $S --config $C --interval 1 2>>$OUT/tui_$1.jsonl | tee $OUT/tui_$1.json | tee -a $LOG
    echo "serve CPU % over the $1 runs: $(python3 -c "import sys; print(round(100*($(ticks $SERVE)-$t0)/100/($(date +%s.%N)-$w0),3))")" | tee -a $LOG
  }
  if want viewer || want idle; then
    step viewer-idle
    viewer idle
  fi
  if ! want viewer && ! want busy; then kill $SERVE ${PREVSERVE:-}; wait; step done; exit 0; fi
  step load-start
  python3 bench/gpu_load.py --gib 8 --n 8192 --seconds 400 & LOADPID=$!
  python3 bench/gpu_load.py --gib 1 --n 2048 --seconds 400 --pause 0.05 & SECONDPID=$!
  sleep 12
  step viewer-busy
  viewer busy
  kill $LOADPID $SECONDPID $SERVE ${PREVSERVE:-} 2>/dev/null; wait
fi
step done
