"""The serve's long history: one compact point per GPU per tick over an hour, in a ring of fixed length.

The frame carries the dashboard's few minutes (``HISTORY_POINTS``); an hour in every frame would multiply each
frame's size by ten for every viewer on every tick, so the hour stays in the serve and is read on request.
"""

from __future__ import annotations

import math
import threading
from collections import deque

from amdtop.pipeline.frame import NodeFrame
from amdtop.pipeline.series import newest

HISTORY_S = 3600.0
"""How far back the serve keeps GPU samples."""

Point = tuple[float, tuple[tuple[int, float | None, float | None, float | None], ...]]
"""(timestamp, ((GPU, util %, VRAM %, power W), ...))."""


class HourHistory:
    """A ring of ``ceil(HISTORY_S / interval)`` points (bounded memory whatever the uptime)."""

    def __init__(self, interval: float, span_s: float = HISTORY_S) -> None:
        self.capacity = max(2, math.ceil(span_s / interval))
        self._points: deque[Point] = deque(maxlen=self.capacity)
        self._lock = threading.Lock()

    def add(self, frame: NodeFrame) -> None:
        """Append the newest sample of every GPU (a runtime subscriber)."""
        gpus = []
        for h in frame.history:
            gpus.append((h.index, newest(h.util_pct), newest(h.vram_pct), newest(h.power_w)))
        with self._lock:
            self._points.append((frame.snapshot.timestamp, tuple(gpus)))

    def points(self) -> list[Point]:
        """Every point kept, oldest first."""
        with self._lock:
            return list(self._points)

    def __len__(self) -> int:
        return len(self._points)
