"""The serve's long history: one compact point per GPU per tick over an hour, in a ring of fixed length.

The frame carries the dashboard's few minutes (``HISTORY_POINTS``); an hour in every frame would multiply each
frame's size by ten for every viewer on every tick, so the hour stays in the serve and is read on request.
"""

from __future__ import annotations

import math
import threading
from collections import deque
from collections.abc import Sequence

from amdtop.pipeline.frame import NodeFrame

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
            gpus.append((h.index, _last(h.util_pct), _last(h.vram_pct), _last(h.power_w)))
        with self._lock:
            self._points.append((frame.snapshot.timestamp, tuple(gpus)))

    def points(self) -> list[Point]:
        """Every point kept, oldest first."""
        with self._lock:
            return list(self._points)

    def __len__(self) -> int:
        return len(self._points)


def _last(series: Sequence[float | None]) -> float | None:
    return series[-1] if series else None
