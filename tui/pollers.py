"""The poller thread: runs the core's :class:`~amdtop.pipeline.NodePipeline` and hands each frame to the UI.

The pipeline lives in ONE long-lived thread worker that waits on an Event between ticks, so ticks never overlap and
quitting interrupts the wait at once. Frames travel to the UI as messages; nothing else is shared.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from amdtop.pipeline import NodeFrame, NodePipeline


def poll_loop(
    pipeline: NodePipeline,
    interval: Callable[[], float],
    stop: threading.Event,
    deliver: Callable[[NodeFrame], None],
    fail: Callable[[str], None],
    cancelled: Callable[[], bool],
) -> None:
    """Tick until ``stop`` is set: deliver a frame (or the tick's error), then wait ``interval()`` seconds."""
    while not stop.is_set() and not cancelled():
        try:
            frame = pipeline.tick()
        except Exception as exc:  # keep polling: a transient backend error should not freeze the screen
            if not cancelled():
                fail(f"poll: {exc}")
        else:
            if not cancelled():
                deliver(frame)
        stop.wait(interval())
