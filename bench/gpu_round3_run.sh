#!/usr/bin/env bash
# Issue 53 (session 24) on a lent NVIDIA card, one device call per STEP set. Wheels in tmp/whl; earlier trees as
# `git archive REV amdtop tui widgets` in tmp/old14 (6ebcbc7: session 14's H200 run) and tmp/old21 (6c9c014: session
# 21's H100 run), each run with `python3 -P` so the working tree's own packages stay off its path.
#   sidle / sbusy: bench/side_by_side.py, every program AT ONCE, each pinned on its own CPU, W windows of SECS:
#          this tree in-process, the two earlier trees in-process, the bare Textual clock, the clock with NVML
#          initialised, nvitop, this tree's viewer + its serve. Same windows, same card: the ratios of the idle rise.
#   tidle / tbusy: bench/tui_cpu.py interleaved runs of this tree (in-process, viewer + serve), nvitop and the
#          floors: the terminal bytes and the RSS that side_by_side does not read.
#   pidle / pbusy: bench/pty_profile.py, py-spy's raw stacks of this tree's in-process dashboard (py-spy from tmp/whl).
#   cidle / cbusy: bench/nvml_tick_calls.py, the CPU of each NVML call a tick makes.
#   usage: STEPS="sidle sbusy" W=6 SECS=20 bash bench/gpu_round3_run.sh
set -u
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site tmp/whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PATH=/tmp/site/bin:$PATH
LOG=$OUT/log.txt C=/tmp/none.toml
touch $C
want() { [[ " ${STEPS:-sidle sbusy} " == *" $1 "* ]]; }
step() { echo "=== $* ($(date +%T))" | tee -a $LOG; }
{ nvidia-smi --query-gpu=name,driver_version,memory.used,utilization.gpu,persistence_mode --format=csv; python3 -c 'import sys,textual,psutil; print(sys.version, textual.__version__, psutil.__version__)'; nproc; lscpu | grep -E 'Model name|^CPU\(s\)'; uptime; } >>$LOG 2>&1
load_start() {  # the busy GPU: a bf16 matmul loop on 8 GiB and a second CUDA process
  step load-start
  python3 bench/gpu_load.py --gib 8 --n 8192 --seconds $1 & LOADPID=$!
  python3 bench/gpu_load.py --gib 1 --n 2048 --seconds $1 --pause 0.05 & SECONDPID=$!
  sleep 12
}
load_stop() { kill $LOADPID $SECONDPID 2>/dev/null; wait $LOADPID $SECONDPID 2>/dev/null; }
inproc() { echo "python3 -P -m tui --no-attach --readonly --backend nvml --interval 1 --state-dir /tmp/ip-$1 --config $C"; }
sbs() {
  step sbs-$1
  # OLDS="label:DIR ...": earlier trees' in-process dashboards in the same windows (git archive REV amdtop tui widgets)
  local olds=() o
  for o in ${OLDS:-6ebcbc7:tmp/old14 6c9c014:tmp/old21}; do
    olds+=(--run "in-process-${o%%:*}" nvml "env PYTHONPATH=/tmp/site:$PWD/${o#*:} $(inproc ${o%%:*}-$1)")
  done
  python3 bench/side_by_side.py --windows "${W:-6}" --seconds "${SECS:-20}" --threads --json --pin "${PIN:-1,3,5,7,9,11,13,15}" \
    --run in-process nvml "$(inproc new-$1)" \
    "${olds[@]}" \
    --run floor backend "python3 bench/textual_floor.py" \
    --run floor+nvml backend "env AMDTOP_FLOOR_NVML=1 python3 bench/textual_floor.py" \
    --run nvitop "${NVMARK:-NVIDIA}" "python3 -m nvitop --interval 1" \
    --run viewer+serve attached "env PYTHONPATH=/tmp/site:$PWD SERVE='python3 -P -m amdtop serve' VIEWER='python3 -P -m tui' bash bench/serve_pair.sh /tmp/pair-$1 127.0.0.1:1942${2} --backend nvml --config $C --interval 1" \
    2>>$LOG | tee $OUT/sbs_$1.json | tail -40 >>$LOG
}
tui() {
  step tui-$1
  # SHORT=1: nvitop beside the in-process dashboard only (the terminal bytes, on a short device budget)
  # FLOORS="floor floor+nvml" (the default) picks the floors run beside it: a short device budget drops what a
  # measure does not need (busy is against nvitop; floor+nvml is no target's peer)
  local more=(--peer "env PYTHONPATH=/tmp/site:$PWD SERVE='python3 -P -m amdtop serve' VIEWER='python3 -P -m tui' bash bench/serve_pair.sh /tmp/tpair-$1 127.0.0.1:1943${2} --backend nvml --config $C --interval 1"
    --peer-marker attached --peer-label viewer+serve)
  [[ " ${FLOORS-floor floor+nvml} " == *" floor+nvml "* ]] && more+=(--peer "env AMDTOP_FLOOR_NVML=1 python3 bench/textual_floor.py" --peer-marker backend --peer-label floor+nvml)
  [[ " ${FLOORS-floor floor+nvml} " == *" floor "* ]] && more+=(--peer "python3 bench/textual_floor.py" --peer-marker backend --peer-label floor)
  [ "${SHORT:-0}" = 1 ] && more=()
  # PREV=DIR: an earlier tree's in-process dashboard in the same runs (git archive REV amdtop tui widgets)
  [ -n "${PREV:-}" ] && more+=(--peer "env PYTHONPATH=/tmp/site:$PWD/$PREV $(inproc prev-$1)" --peer-marker nvml --peer-label in-process-prev)
  python3 bench/tui_cpu.py --runs "${RUNS:-2}" --seconds "${TSECS:-20}" --warmup "${TWARM:-5}" --marker nvml --markdown \
    --save $OUT/screens_$1 --peer "python3 -m nvitop --interval 1" --peer-marker "${NVMARK:-NVIDIA}" --peer-label nvitop \
    "${more[@]}" --label in-process -- $(inproc t-$1) 2>>$OUT/tui_$1.jsonl | tee $OUT/tui_$1.md >>$LOG
}
if want sidle; then sbs idle 1; fi
if want tidle; then tui idle 1; fi
prof() {  # PROF=1: py-spy's raw stacks of the in-process dashboard (which thread spends the extra, on what)
  step prof-$1
  python3 bench/pty_profile.py --out $OUT/prof_$1.raw --seconds "${PSECS:-40}" --rate "${PRATE:-250}" -- $(inproc prof-$1) 2>>$LOG
}
calls() {  # the NVML calls of one tick, each timed (which call a busy GPU makes dear)
  step calls-$1
  python3 bench/nvml_tick_calls.py --n 300 --json $OUT/calls_$1.json >>$LOG 2>&1
}
if want pidle; then prof idle; fi
if want cidle; then calls idle; fi
if want sbusy || want tbusy || want pbusy || want cbusy; then
  load_start 900
  if want sbusy; then sbs busy 2; fi
  if want tbusy; then tui busy 2; fi
  if want pbusy; then prof busy; fi
  if want cbusy; then calls busy; fi
  load_stop
fi
step done
