#!/usr/bin/env bash
# An attached viewer and its own `amdtop serve` measured as ONE program: bench/tui_cpu.py counts a process and its
# descendants, so the serve starts here, the viewer attaches once the socket exists and replaces this shell (the serve
# is then the viewer's child), and both are counted over the same window; tui_cpu's kill of the process group ends
# both. (Sessions 12-13 counted the serve's ticks over the whole step, its minutes without a viewer included.)
#   usage: bench/serve_pair.sh STATE_DIR LISTEN ARGS...   (ARGS go to both: --backend, --config, --interval)
# SERVE and VIEWER replace the two commands (word-split), e.g. the H200's capture on a machine without a GPU:
#   SERVE="python3 bench/replay_serve.py tests/fixtures/nvml/h200_replay.json --" bench/serve_pair.sh /tmp/p \
#       127.0.0.1:19407 --config /tmp/none.toml --interval 1
set -u
S=$1 L=$2; shift 2
rm -rf "$S"
# shellcheck disable=SC2086  # the commands are word lists on purpose
${SERVE:-python3 -m amdtop serve} --state-dir "$S" --listen "$L" "$@" >"$S.serve.log" 2>&1 &
for _ in $(seq 300); do [ -S "$S/serve.sock" ] && break; sleep 0.1; done  # 30 s: a loaded machine starts slowly
# shellcheck disable=SC2086
exec ${VIEWER:-python3 -m tui} --state-dir "$S" "$@"
