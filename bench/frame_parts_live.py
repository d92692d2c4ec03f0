"""Where each frame's CPU goes in the RUNNING programs, in-process dashboard against viewer + serve, side by side in
200x50 ptys on the H200's idle capture: each part below is wrapped from outside the tree and timed with
``time.thread_time_ns`` per call (medians and means over the run; cold, as a 1 Hz program pays). Session 19's table
"Where the viewer + serve pair pays more" in docs/benchmarks.md.

    .venv/bin/python bench/frame_parts_live.py tests/fixtures/nvml/h200_replay.json --seconds 100
"""

from __future__ import annotations

import os
import runpy
import shlex
import statistics
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

OUT = "/tmp/frame_parts_{label}.txt"


def _instrument(label: str) -> None:
    sys.path.insert(0, os.getcwd())
    import amdtop.serve.client as client
    import amdtop.serve.wire as wire
    import tui.app as app
    import tui.screens.dashboard as dashboard

    stats: dict[str, list[int]] = {}

    def timed(owner: Any, name: str, key: str) -> None:
        orig: Callable[..., Any] = getattr(owner, name)

        def wrapper(*args: Any, **kw: Any) -> Any:
            t = time.thread_time_ns()
            try:
                return orig(*args, **kw)
            finally:
                stats.setdefault(key, []).append(time.thread_time_ns() - t)

        setattr(owner, name, wrapper)

    timed(app.AmdtopApp, "on_snapshot_ready", "on_snapshot_ready")
    timed(dashboard.DashboardScreen, "apply", "apply")
    timed(dashboard.DashboardScreen, "relayout", "relayout")
    timed(dashboard, "repaint_now", "repaint_now")
    timed(client.ServeClient, "_readable", "read: ServeClient._readable")
    timed(client.ServeClient, "_dispatch", "read: dispatch")
    timed(wire, "decode", "read: decode")
    timed(wire, "apply_history_delta", "read: apply_history_delta")

    def dump() -> None:
        while True:
            time.sleep(5)
            with open(OUT.format(label=label), "w") as fh:
                for key, values in sorted(stats.items()):
                    v = values[10:]  # start-up's first frames left out
                    if v:
                        med, mean = statistics.median(v) / 1e3, statistics.mean(v) / 1e3
                        fh.write(f"{key:30} n={len(v):4d} median {med:7.0f} us  mean {mean:7.0f} us\n")

    threading.Thread(target=dump, daemon=True).start()


def main() -> int:
    if sys.argv[1] == "--child":
        label, rest = sys.argv[2], sys.argv[3:]
        _instrument(label)
        if rest[0] == "-m":
            sys.argv = [rest[1], *rest[2:]]
            runpy.run_module(rest[1], run_name="__main__", alter_sys=True)
        else:
            sys.argv = rest
            runpy.run_path(rest[0], run_name="__main__")
        return 0
    fixture = sys.argv[1]
    seconds = float(sys.argv[3]) if len(sys.argv) > 3 and sys.argv[2] == "--seconds" else 100.0
    sys.path.insert(0, os.path.dirname(__file__))
    from tui_cpu import PtyRun

    open("/tmp/none.toml", "a").close()
    me = f"{sys.executable} bench/frame_parts_live.py --child"
    inproc = (
        f"{me} inproc bench/replay_tui.py {fixture} -- --no-attach --readonly --interval 1 "
        "--state-dir /tmp/fpl-i --config /tmp/none.toml"
    )
    pair = (
        f"env SERVE='{sys.executable} bench/replay_serve.py {fixture} --' VIEWER='{me} viewer -m tui' "
        "bench/serve_pair.sh /tmp/fpl-p 127.0.0.1:19427 --config /tmp/none.toml --interval 1"
    )
    runs = [PtyRun(shlex.split(inproc), 200, 50), PtyRun(shlex.split(pair), 200, 50)]
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for r in runs:
            r.pump(0.01)
    for r in runs:
        r.stop()
    for label in ("inproc", "viewer"):
        print(f"== {label}")
        with open(OUT.format(label=label)) as fh:
            print(fh.read(), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
