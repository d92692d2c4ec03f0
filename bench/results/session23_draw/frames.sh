#!/bin/bash
cd /work/wt/draw
PY=/work/main/.venv/bin/python
for i in 1 2 3 4 5; do for t in /tmp/drawbase /work/wt/draw; do
  l=$([ $t = /tmp/drawbase ] && echo main || echo draw)
  PYTHONPATH=$t $PY bench/dashboard_frames.py --fixture tests/fixtures/nvml/h200_health_idle_replay.json --frames 300 --label "idle $l"
  PYTHONPATH=$t $PY bench/dashboard_frames.py --fixture tests/fixtures/nvml/h200_health_replay.json --loop --frames 300 --label "busy $l"
done; done
