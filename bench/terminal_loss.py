"""Seconds from a killed terminal to amdtop's exit: `amdtop --demo` in tmux, its demo workers up, `tmux kill-server`.

Usage: python bench/terminal_loss.py [--runs 3] [--block-sighup]
--block-sighup starts tmux with SIGHUP blocked in the inherited signal mask (as a CI runner may), so amdtop must
notice the dead tty itself.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.tui.test_tmux import Tmux, demo_worker_pids


def one(block_sighup: bool) -> float:
    t = Tmux(Path(tempfile.mkdtemp()), block_sighup=block_sighup)
    t.start(80, 24)
    t.wait_for("GPUs")
    deadline = time.monotonic() + 20
    while not demo_worker_pids(t.tmp / "state") and time.monotonic() < deadline:
        time.sleep(0.2)
    pid = t.pid()
    t0 = time.monotonic()
    t.kill()
    while time.monotonic() - t0 < 40:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return time.monotonic() - t0
        time.sleep(0.05)
    raise SystemExit(f"amdtop (pid {pid}) still running 40 s after its terminal went away")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--block-sighup", action="store_true")
    args = ap.parse_args()
    secs = [one(args.block_sighup) for _ in range(args.runs)]
    print(f"gone after {', '.join(f'{s:.2f}' for s in secs)} s; median {statistics.median(secs):.2f} s")


if __name__ == "__main__":
    main()
