"""Deltas of cumulative hardware counters that may wrap (32-bit firmware accumulators) or reset (driver reload)."""

from __future__ import annotations

from collections.abc import Sequence

from amdtop.model import NodeSnapshot

_U32 = 1 << 32


def counter_delta(old: float, new: float) -> float | None:
    """``new - old``; a 32-bit counter that wrapped (old in its top half, new in its bottom half) is unwrapped;
    any other decrease is a reset and gives ``None`` (no value rather than a wrong one)."""
    if new >= old:
        return new - old
    if _U32 // 2 <= old < _U32 and new < _U32 // 2:
        return new + _U32 - old
    return None


def window(history: Sequence[NodeSnapshot], window_s: float) -> list[NodeSnapshot]:
    """The snapshots of the last ``window_s`` seconds of ``history`` (oldest first), newest included."""
    if not history:
        return []
    end = history[-1].timestamp
    # Walk back to the last snapshot at or before the window's start: it is the baseline the deltas start from.
    start = len(history) - 1
    while start > 0 and history[start].timestamp > end - window_s:
        start -= 1
    return list(history[start:])
