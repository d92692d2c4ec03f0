"""The collector's own time in a running dashboard: ``python bench/gc_rate.py OUT THRESHOLD PROGRAM ARGS...`` runs
PROGRAM (a script, as ``python PROGRAM ARGS`` would) with amdtop's young threshold set to THRESHOLD, and writes to OUT
each generation's collections and CPU per second over 60 s after 30 s of warm-up (``gc.callbacks``). Two at once, in
ptys, on the H200's idle capture (docs/benchmarks.md, session 19):

    .venv/bin/python bench/gc_rate.py --pair tests/fixtures/nvml/h200_replay.json     # 700 beside 20,000, ~100 s
"""

from __future__ import annotations

import gc
import os
import runpy
import shlex
import sys
import threading
import time


def _measure(out: str) -> None:
    acc = {0: [0, 0], 1: [0, 0], 2: [0, 0]}
    started = [0]

    def callback(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            started[0] = time.thread_time_ns()
        else:
            acc[info["generation"]][0] += 1
            acc[info["generation"]][1] += time.thread_time_ns() - started[0]

    def report() -> None:
        time.sleep(30)
        a = {k: list(v) for k, v in acc.items()}
        time.sleep(60)
        with open(out, "w") as fh:
            fh.write(f"threshold {gc.get_threshold()}\n")
            for g in (0, 1, 2):
                n, ns = acc[g][0] - a[g][0], acc[g][1] - a[g][1]
                fh.write(f"gen{g}: {n / 60:.3f} collections/s, {ns / 60 / 1e3:.1f} us/s\n")

    gc.callbacks.append(callback)
    threading.Thread(target=report, daemon=True).start()


def _pair(fixture: str) -> int:
    sys.path.insert(0, os.path.dirname(__file__))
    from tui_cpu import PtyRun

    cmd = (
        f"{sys.executable} bench/gc_rate.py /tmp/gc_rate_{{t}}.txt {{t}} bench/replay_tui.py {fixture} -- --no-attach "
        "--readonly --interval 1 --state-dir /tmp/gc-rate-{t} --config /tmp/none.toml"
    )
    open("/tmp/none.toml", "a").close()
    runs = [PtyRun(shlex.split(cmd.format(t=t)), 200, 50) for t in (700, 20_000)]
    end = time.monotonic() + 100
    while time.monotonic() < end:
        for r in runs:
            r.pump(0.01)
    for r in runs:
        r.stop()
    for t in (700, 20_000):
        with open(f"/tmp/gc_rate_{t}.txt") as fh:
            print(fh.read(), end="")
    return 0


def main() -> int:
    if sys.argv[1] == "--pair":
        return _pair(sys.argv[2])
    out, threshold, program, *args = sys.argv[1:]
    sys.path.insert(0, os.getcwd())
    import amdtop.heap

    amdtop.heap.GEN0_THRESHOLD = int(threshold)  # settle() sets it once start-up is frozen
    _measure(out)
    sys.argv = [program, *args]
    runpy.run_path(program, run_name="__main__")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
