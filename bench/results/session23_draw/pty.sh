#!/bin/bash
# $1: idle|busy
cd /work/wt/draw
PY=/work/main/.venv/bin/python
if [ "$1" = busy ]; then FIX=tests/fixtures/nvml/h200_health_replay.json; LOOP=--loop; else FIX=tests/fixtures/nvml/h200_health_idle_replay.json; LOOP=; fi
ARGS="--no-attach --readonly --interval 1 --config /tmp/none.toml"
$PY bench/tui_cpu.py --runs 4 --seconds 20 --warmup 5 --marker nvml --markdown --label draw --save /tmp/drawbench/save2_$1 \
  --peer "env PYTHONPATH=/tmp/drawbase $PY $PWD/bench/replay_tui.py $FIX --no-discovery $LOOP -- $ARGS --state-dir /tmp/drawbench/st_main_$1" \
  --peer-marker nvml --peer-label main \
  -- env PYTHONPATH=$PWD $PY bench/replay_tui.py $FIX --no-discovery $LOOP -- $ARGS --state-dir /tmp/drawbench/st_draw_$1
