#!/usr/bin/env bash
# Session 12 on the lent H200, one device call per STEP set (wheels in tmp/whl):
#   xid:    a device-side assert (Xid 43), then 40 s later `amdtop snapshot --json`, an in-process dashboard and a
#           dashboard attached to a serve started after the fault, each checked for the fault (issue 35).
#   idle / busy: `amdtop serve` + an attached viewer against the in-process dashboard, nvitop and a bare Textual clock
#           (the floor), the serve's own CPU over the same windows (issues 33 and 34).
#   rss2:   (session 14) anonymous memory by mapping size: in-process (and MALLOC_ARENA_MAX=2), nvitop, viewer+serve.
#   pidle / pbusy: (session 14) viewer+serve as ONE program (bench/serve_pair.sh) against the in-process dashboard
#           with and without the heap freeze, nvitop and the floor; collector pauses logged (bench/gc_pauses).
#   prof:   (session 14) py-spy of the in-process dashboard idle and busy, and of a viewer and its serve busy.
#   rss:    (session 13) the in-process dashboard's and nvitop's resident memory per mapping (bench/rss_map.py).
# usage: STEPS="xid idle busy" RUNS=2 SECS=20 bash bench/h200_session12_run.sh
set -u
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site tmp/whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD
LOG=$OUT/log.txt
step() { echo "=== $* ($(date +%T))" | tee -a $LOG; }
load_start() {  # load_start SECONDS: the busy GPU (a bf16 matmul loop on 8 GiB and a second CUDA process); sets LOADPID SECONDPID
  step load-start
  python3 bench/gpu_load.py --gib 8 --n 8192 --seconds $1 & LOADPID=$!
  python3 bench/gpu_load.py --gib 1 --n 2048 --seconds $1 --pause 0.05 & SECONDPID=$!
  sleep 12
}
want() { [[ " ${STEPS:-xid idle busy} " == *" $1 "* ]]; }
ticks() { awk '{print $14+$15}' /proc/$1/stat; }
C=/tmp/none.toml
step info
{ nvidia-smi --query-gpu=name,driver_version,memory.used,utilization.gpu --format=csv; python3 -c 'import sys,textual,psutil; print(sys.version, textual.__version__, psutil.__version__)'; nproc; uptime; git log --oneline -1 2>/dev/null; } >>$LOG 2>&1
if want xid; then
  step xid-assert
  python3 -c "
import torch
x = torch.zeros(4, device='cuda'); i = torch.tensor([10], device='cuda'); y = x[i]; torch.cuda.synchronize()
" >$OUT/xid_assert.txt 2>&1
  dmesg | grep NVRM | tail -3 | tee -a $LOG
  sleep 40
  step xid-snapshot-40s-later
  timeout 60 python3 -m amdtop snapshot --json --backend nvml --config $C >$OUT/xid_snapshot.json 2>>$LOG
  python3 - "$OUT/xid_snapshot.json" <<'PY' | tee -a $LOG
import json, sys
d = json.load(open(sys.argv[1]))
print("flags:", [(f.get("kind"), f.get("gpu"), f.get("message", "")[:120]) for f in d.get("flags", [])])
print("incidents:", json.dumps(d.get("incidents"))[:600])
print("kernel_log:", d.get("kernel_log"))
PY
  step xid-dashboard-in-process
  python3 bench/tui_cpu.py --runs 1 --seconds 4 --warmup 2 --marker nvml --save $OUT/xid_tui \
    -- python3 -m tui --no-attach --readonly --backend nvml --interval 1 --state-dir /tmp/xid-inproc --config $C >/dev/null 2>&1
  python3 -c "import re,sys,glob; t=open(sorted(glob.glob('$OUT/xid_tui/*'))[-1],errors='replace').read(); t=re.sub(r'\x1b\[[0-9;?]*[A-Za-z]','',t); print('in-process dashboard shows Xid 43:', 'Xid 43' in t or 'Xid43' in t)" | tee -a $LOG
  step xid-dashboard-attached
  python3 -m amdtop serve --backend nvml --interval 1 --state-dir /tmp/xid-serve --config $C --listen 127.0.0.1:19410 >$OUT/xid_serve.log 2>&1 &
  XS=$!; sleep 5
  python3 bench/tui_cpu.py --runs 1 --seconds 4 --warmup 2 --marker nvml --save $OUT/xid_att \
    -- python3 -m tui --state-dir /tmp/xid-serve --config $C --interval 1 >/dev/null 2>&1
  python3 -c "import re,sys,glob; t=open(sorted(glob.glob('$OUT/xid_att/*'))[-1],errors='replace').read(); t=re.sub(r'\x1b\[[0-9;?]*[A-Za-z]','',t); print('attached viewer shows Xid 43:', 'Xid 43' in t or 'Xid43' in t, '| attached:', 'attached' in t)" | tee -a $LOG
  kill $XS; wait $XS 2>/dev/null
  dmesg -T | grep NVRM >$OUT/xid_dmesg.txt
fi
if want rss; then
  # Session 13 (issue 34): where the in-process dashboard's resident memory is, beside nvitop's (bench/rss_map.py).
  step rss
  python3 bench/tui_cpu.py --runs 1 --seconds 8 --warmup 4 --marker nvml -- \
    python3 -m tui --no-attach --readonly --backend nvml --interval 1 --state-dir /tmp/rss-inproc --config $C >/dev/null 2>&1 &
  RT=$!; sleep 9
  for p in $(pgrep -f "^python3 -m tui --no-attach --readonly --backend nvml"); do
    python3 bench/rss_map.py $p --top 30 >$OUT/rss_inproc.txt 2>&1
  done
  wait $RT
  python3 bench/tui_cpu.py --runs 1 --seconds 8 --warmup 4 --marker H200 -- python3 -m nvitop --interval 1 >/dev/null 2>&1 &
  RT=$!; sleep 9
  for p in $(pgrep -f "^python3 -m nvitop --interval 1"); do
    python3 bench/rss_map.py $p --top 30 >$OUT/rss_nvitop.txt 2>&1
  done
  wait $RT
  head -12 $OUT/rss_inproc.txt $OUT/rss_nvitop.txt | tee -a $LOG
fi
spyon() {  # spyon LABEL PATTERN: 30 s of py-spy samples (raw, non-blocking) of the process whose argv matches PATTERN
  local p; p=$(pgrep -f "$2" | head -1)
  [ -n "$p" ] && { /tmp/site/bin/py-spy record -r 200 -d 30 -f raw -n -o $OUT/prof_$1.raw -p $p >>$LOG 2>&1 || echo "py-spy failed for $1" | tee -a $LOG; }
}
if want prof; then
  # Session 14 (issues 33/34): where the in-process dashboard's idle and busy ticks go, and the serve's and viewer's
  # busy ticks, sampled on the H200 itself (the replay cannot reproduce the idle GPU's path).
  inproc="python3 -m tui --no-attach --readonly --backend nvml --interval 1 --state-dir /tmp/prof-inproc --config $C"
  step prof-inproc-idle
  python3 bench/tui_cpu.py --runs 1 --seconds 40 --warmup 2 --marker nvml --label inproc-idle -- $inproc 2>>$OUT/prof_cpu.jsonl >/dev/null &
  T=$!; sleep 8; spyon inproc_idle "^$inproc"; wait $T
  load_start 300
  step prof-inproc-busy
  python3 bench/tui_cpu.py --runs 1 --seconds 40 --warmup 2 --marker nvml --label inproc-busy -- $inproc 2>>$OUT/prof_cpu.jsonl >/dev/null &
  T=$!; sleep 8; spyon inproc_busy "^$inproc"; wait $T
  step prof-attached-busy
  S=/tmp/prof-serve
  python3 -m amdtop serve --backend nvml --interval 1 --state-dir $S --config $C --listen 127.0.0.1:19401 >$OUT/prof_serve.log 2>&1 &
  PS=$!; sleep 6
  python3 bench/tui_cpu.py --runs 1 --seconds 40 --warmup 2 --marker nvml --label viewer-busy -- python3 -m tui --state-dir $S --config $C --interval 1 2>>$OUT/prof_cpu.jsonl >/dev/null &
  T=$!; sleep 8; spyon viewer_busy "^python3 -m tui --state-dir $S" & V=$!
  spyon serve_busy "^python3 -m amdtop serve --backend nvml --interval 1 --state-dir $S"; wait $V $T
  kill $PS $LOADPID $SECONDPID 2>/dev/null; wait
  cat $OUT/prof_cpu.jsonl | tee -a $LOG
fi
if want rss2; then
  # Session 14 (issue 34): the anonymous memory by mapping size (thread arenas, stacks, pymalloc) of the in-process
  # dashboard (also under MALLOC_ARENA_MAX=2), a viewer, a serve, nvitop, and a bare Python that only runs nvmlInit.
  rss2() {  # rss2 LABEL PATTERN COMMAND...
    local label=$1 pat=$2; shift 2
    python3 bench/tui_cpu.py --runs 1 --seconds 10 --warmup 4 --marker "${MARK:-nvml}" -- "$@" >/dev/null 2>&1 &
    local t=$!; sleep 11
    for p in $(pgrep -f "$pat"); do
      { echo "== $label (threads $(ls /proc/$p/task | wc -l))"; python3 bench/rss_map.py $p --top 6 --anon; } >>$OUT/rss2.txt 2>&1
    done
    wait $t
  }
  step rss2
  rss2 in-process "^python3 -m tui --no-attach --readonly --backend nvml --interval 1 --state-dir /tmp/r2a" \
    python3 -m tui --no-attach --readonly --backend nvml --interval 1 --state-dir /tmp/r2a --config $C
  rss2 in-process-arena2 "^python3 -m tui --no-attach --readonly --backend nvml --interval 1 --state-dir /tmp/r2b" \
    env MALLOC_ARENA_MAX=2 python3 -m tui --no-attach --readonly --backend nvml --interval 1 --state-dir /tmp/r2b --config $C
  MARK=H200 rss2 nvitop "^python3 -m nvitop --interval 1" python3 -m nvitop --interval 1
  MARK=attached rss2 viewer+serve "^python3 -m (tui|amdtop serve) --state-dir /tmp/r2c" \
    bash bench/serve_pair.sh /tmp/r2c 127.0.0.1:19405 --backend nvml --config $C --interval 1
  MARK=nvml-only rss2 nvml-only "^python3 -c import pynvml" \
    python3 -c 'import pynvml, time; pynvml.nvmlInit(); h = pynvml.nvmlDeviceGetHandleByIndex(0); print("nvml-only", flush=True); time.sleep(30)'
  cat $OUT/rss2.txt | tee -a $LOG
fi
if want pidle || want pbusy; then
  # Session 14 (issues 33/34): the viewer and its own serve measured as one program over the same window
  # (bench/serve_pair.sh), beside nvitop, the in-process dashboard (with and without the heap's freeze: bench/gc_pauses)
  # and the floor; every amdtop process logs its collector's passes.
  pair() {
    local G=$OUT/gc_$1; mkdir -p $G
    local gcenv="env GC_PAUSES_DIR=$G PYTHONPATH=$PWD/bench/gc_pauses:/tmp/site:$PWD"
    local nofreeze=()  # NOFREEZE=0 leaves the in-process dashboard without the heap's freeze out
    [ "${NOFREEZE:-1}" = 1 ] && nofreeze=(--peer "$gcenv GC_PAUSES_NO_FREEZE=1 python3 -m tui --no-attach --readonly --backend nvml --interval 1 --state-dir /tmp/inproc2 --config $C" --peer-marker nvml --peer-label in-process-nofreeze)
    local floor=(--peer 'python3 bench/textual_floor.py' --peer-marker backend --peer-label floor)  # FLOOR=0: left out
    [ "${FLOOR:-1}" = 1 ] || floor=()
    # (session 21, issue 53) FLOORNVML=1: also the floor with NVML initialised in the same interpreter (the RSS floor)
    [ "${FLOORNVML:-0}" = 1 ] && floor+=(--peer 'env AMDTOP_FLOOR_NVML=1 python3 bench/textual_floor.py' --peer-marker backend --peer-label floor+nvml)
    local nvitop=(--peer 'python3 -m nvitop --interval 1' --peer-marker ${NVMARK:-NVIDIA} --peer-label nvitop)  # NVITOP=0: left out
    [ "${NVITOP:-1}" = 1 ] || nvitop=()
    # (session 15) OLD=DIR: a copy of an earlier tree's amdtop/, tui/, widgets/ (git archive REV amdtop tui widgets), its
    # pair measured in the same runs; python3 -P keeps the working tree's own packages off its path.
    local old=()
    [ -n "${OLD:-}" ] && old=(--peer "env GC_PAUSES_DIR=$G PYTHONPATH=$PWD/bench/gc_pauses:/tmp/site:$PWD/$OLD SERVE='python3 -P -m amdtop serve' VIEWER='python3 -P -m tui' bash bench/serve_pair.sh /tmp/pair-old-$1 127.0.0.1:19408 --backend nvml --config $C --interval 1" --peer-marker attached --peer-label viewer+serve-old)
    python3 bench/tui_cpu.py --runs ${RUNS:-2} --seconds ${SECS:-25} --marker attached --markdown \
      "${nvitop[@]}" \
      --peer "$gcenv python3 -m tui --no-attach --readonly --backend nvml --interval 1 --state-dir /tmp/inproc --config $C" \
      --peer-marker nvml --peer-label in-process \
      "${nofreeze[@]}" "${floor[@]}" "${old[@]}" \
      --label viewer+serve -- $gcenv bash bench/serve_pair.sh /tmp/pair-$1 127.0.0.1:19406 --backend nvml --config $C --interval 1 \
      2>>$OUT/pair_$1.jsonl | tee $OUT/pair_$1.json | tee -a $LOG
    python3 bench/gc_pauses/summary.py $G --after 8 >$OUT/gc_$1.txt 2>&1
  }
  if want pidle; then step pair-idle; pair idle; fi
  if want pbusy; then
    load_start 560
    step pair-busy; pair busy
    kill $LOADPID $SECONDPID 2>/dev/null; wait
  fi
fi
if want idle || want busy; then
  S=/tmp/serve-state
  python3 -m amdtop serve --backend nvml --interval 1 --state-dir $S --config $C --listen 127.0.0.1:19400 >$OUT/serve.log 2>&1 &
  SERVE=$!
  sleep 6
  viewer() {
    local t0; t0=$(ticks $SERVE); local w0; w0=$(date +%s.%N)
    python3 bench/tui_cpu.py --runs ${RUNS:-2} --seconds ${SECS:-20} --marker nvml --markdown \
      --peer 'python3 -m nvitop --interval 1' --peer-marker ${NVMARK:-NVIDIA} --peer-label nvitop \
      --peer "python3 -m tui --no-attach --readonly --backend nvml --interval 1 --state-dir /tmp/inproc --config $C" \
      --peer-marker nvml --peer-label in-process \
      --peer 'python3 bench/textual_floor.py' --peer-marker backend --peer-label floor \
      --label viewer -- python3 -m tui --state-dir $S --config $C --interval 1 2>>$OUT/tui_$1.jsonl | tee $OUT/tui_$1.json | tee -a $LOG
    echo "serve CPU % over the $1 runs: $(python3 -c "print(round(100*($(ticks $SERVE)-$t0)/100/($(date +%s.%N)-$w0),3))")" | tee -a $LOG
    echo "serve RSS KiB: $(awk '/VmRSS/{print $2}' /proc/$SERVE/status)" | tee -a $LOG
  }
  if want idle; then step viewer-idle; viewer idle; fi
  if want busy; then
    load_start 500
    step viewer-busy; viewer busy
    if want spy; then
      step spy-serve-busy
      /tmp/site/bin/py-spy record -r 100 -d 20 -f raw -n -o $OUT/serve_busy.raw -p $SERVE >>$LOG 2>&1 || python3 -m py_spy record -r 100 -d 20 -f raw -o $OUT/serve_busy.raw -p $SERVE >>$LOG 2>&1
    fi
    kill $LOADPID $SECONDPID 2>/dev/null
  fi
  kill $SERVE 2>/dev/null; wait
fi
step done
