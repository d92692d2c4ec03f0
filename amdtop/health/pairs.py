"""Per-interval results remembered across ticks: a window of counters slides one sample per tick.

Throttle shares (10 s) and ECC rises (60 s) are sums over consecutive sample pairs; recomputing every pair each tick
cost more than the rest of a read-only tick. The samples are immutable and stay the same objects while they are in
the window, so a pair's result is computed once and looked up after.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

A = TypeVar("A")
R = TypeVar("R")


class PairMemo(Generic[A, R]):
    """``fn(old, new)`` per pair of objects, kept until a :meth:`sweep` finds the pair unused since the last one."""

    def __init__(self, fn: Callable[[A, A], R]) -> None:
        self._fn = fn
        self._hits: dict[tuple[int, int], tuple[A, A, R]] = {}
        self._used: set[tuple[int, int]] = set()

    def __call__(self, old: A, new: A) -> R:
        key = (id(old), id(new))
        self._used.add(key)
        hit = self._hits.get(key)
        # The pair is held, so its ids cannot be reused while the entry lives; the identity check is belt and braces.
        if hit is not None and hit[0] is old and hit[1] is new:
            return hit[2]
        value = self._fn(old, new)
        self._hits[key] = (old, new, value)
        return value

    def sweep(self) -> None:
        """Forget the pairs not asked for since the last sweep (they left the window)."""
        self._hits = {k: v for k, v in self._hits.items() if k in self._used}
        self._used = set()

    def __len__(self) -> int:
        return len(self._hits)
