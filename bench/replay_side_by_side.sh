#!/usr/bin/env bash
# Session 19 (issue 33) on a machine without a GPU: this tree's in-process dashboard and viewer + serve against an
# earlier tree's two (OLD=DIR: `git archive REV amdtop tui widgets bench | tar -x -C DIR`), all four AT THE SAME TIME
# over the same windows (bench/side_by_side.py --threads), every one reading the H200's idle capture through the real
# NVML backend (bench/replay_tui.py, bench/replay_serve.py). bench/h200_side_by_side.sh (SET=old) is the same on the
# lent H200.
#   usage: OLD=/tmp/old W=8 S=30 bash bench/replay_side_by_side.sh > out.json
set -u
cd "$(dirname "$0")/.."
OLD=${OLD:?OLD=DIR: an earlier tree} W=${W:-8} S=${S:-30} FIX=${FIX:-tests/fixtures/nvml/h200_replay.json}
touch /tmp/none.toml
IN="bench/replay_tui.py $FIX -- --no-attach --readonly --interval 1 --config /tmp/none.toml"
RUNS=(
  --run inproc-new nvml ".venv/bin/python $IN --state-dir /tmp/sbs-in"
  --run pair-new attached "env PATH=$PWD/.venv/bin:$PATH SERVE='python3 bench/replay_serve.py $FIX --' bench/serve_pair.sh /tmp/sbs-pn 127.0.0.1:19417 --config /tmp/none.toml --interval 1"
  --run inproc-old nvml "env PYTHONPATH=$OLD .venv/bin/python -P $OLD/$IN --state-dir /tmp/sbs-io"
  --run pair-old attached "env PYTHONPATH=$OLD PATH=$PWD/.venv/bin:$PATH SERVE='python3 -P $OLD/bench/replay_serve.py $FIX --' VIEWER='python3 -P -m tui' bench/serve_pair.sh /tmp/sbs-po 127.0.0.1:19418 --config /tmp/none.toml --interval 1"
)
# FLIP=1 (session 20): the same four started in the reverse order (the program started first reads a few % higher).
[ "${FLIP:-0}" = 1 ] && RUNS=("${RUNS[@]:12:4}" "${RUNS[@]:8:4}" "${RUNS[@]:4:4}" "${RUNS[@]:0:4}")
exec .venv/bin/python bench/side_by_side.py --windows "$W" --seconds "$S" --threads --json "${RUNS[@]}"
