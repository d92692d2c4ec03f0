#!/usr/bin/env bash
# An attached viewer and its own `amdtop serve` measured as ONE program: bench/tui_cpu.py counts a process and its
# descendants, so the serve starts here, the viewer attaches once the socket exists and replaces this shell (the serve
# is then the viewer's child), and both are counted over the same window; tui_cpu's kill of the process group ends
# both. (Session 13 counted the serve's ticks over the whole step, its idle minutes between viewer runs included.)
#   usage: bench/serve_pair.sh STATE_DIR LISTEN ARGS...   (ARGS go to both: --backend, --config, --interval)
set -u
S=$1 L=$2; shift 2
rm -rf "$S"
python3 -m amdtop serve --state-dir "$S" --listen "$L" "$@" >"$S.serve.log" 2>&1 &
for _ in $(seq 100); do [ -S "$S/serve.sock" ] && break; sleep 0.1; done
exec python3 -m tui --state-dir "$S" "$@"
