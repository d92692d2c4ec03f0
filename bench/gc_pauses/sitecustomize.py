"""Every cyclic-collector pass of a Python program, logged: put this folder first on ``PYTHONPATH`` and name a folder
in ``GC_PAUSES_DIR``; each process writes ``gc_<pid>.log`` (wall time, generation, pause in ms, objects collected).
``python3 bench/gc_pauses/summary.py DIR --after SECONDS`` sums them per process and generation. Session 14 (issue 34):
a full pass over start-up's 85,000 objects is 45-64 ms on the VM; on the H200 none landed in a 25-s window.
``GC_PAUSES_NO_FREEZE=1`` makes ``gc.freeze`` a no-op (amdtop/heap.py's settle then only collects): the same tree
measured with and without the freeze in one run."""

from __future__ import annotations

import gc
import os
import sys
import time

if os.environ.get("GC_PAUSES_NO_FREEZE") == "1":
    gc.freeze = lambda: None

_dir = os.environ.get("GC_PAUSES_DIR")
if _dir:
    _log = open(os.path.join(_dir, f"gc_{os.getpid()}.log"), "w", buffering=1)  # noqa: SIM115 (lives as the process)
    _log.write(f"# {' '.join(sys.argv)[:200]}\n")
    _start: list[float] = [0.0]

    def _on_gc(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            _start[0] = time.perf_counter()
        else:
            pause = 1000 * (time.perf_counter() - _start[0])
            _log.write(f"{time.time():.3f} {info['generation']} {pause:.3f} {info['collected']}\n")

    gc.callbacks.append(_on_gc)
