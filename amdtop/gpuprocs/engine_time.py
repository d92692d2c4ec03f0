"""Busy percentages from cumulative engine-time counters (DRM fdinfo ``drm-engine-*``, amdsmi ``engine_usage``)."""

from __future__ import annotations

from collections.abc import Hashable


class EngineRates:
    """Keeps the last (busy ns, time) per key; :meth:`rate` turns the next reading into a percentage."""

    def __init__(self) -> None:
        """No readings yet."""
        self._last: dict[Hashable, tuple[int, float]] = {}
        self._seen: set[Hashable] = set()

    def rate(self, key: Hashable, busy_ns: int, now: float) -> float | None:
        """Percent of wall time the engine was busy since the last reading of ``key``; ``None`` at the first."""
        self._seen.add(key)
        last = self._last.get(key)
        self._last[key] = (busy_ns, now)
        if last is None or now <= last[1] or busy_ns < last[0]:
            return None  # first reading, or the counter restarted (a new client behind a reused key)
        return round(min(100.0, 100.0 * (busy_ns - last[0]) / ((now - last[1]) * 1e9)), 1)

    def forget_unseen(self) -> None:
        """Drop keys not read since the last call (processes that left the GPU)."""
        self._last = {k: v for k, v in self._last.items() if k in self._seen}
        self._seen = set()
