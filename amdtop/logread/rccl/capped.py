"""A list that keeps at most a fixed number of items and counts the rest: what the parser keeps follows what it can
report, never the input's length (issue 52: 1 GiB of one repeated watchdog line must not cost 8 GB)."""

from __future__ import annotations

from typing import SupportsIndex, TypeVar

T = TypeVar("T")

MAX_KEPT = 20000
"""Items kept per list: every rank's lines of a large job, bounded for a log that repeats one line without end."""


class Capped(list[T]):
    """``append`` keeps the first :data:`MAX_KEPT` items (or ``cap``) and counts the ones after in ``dropped``."""

    def __init__(self, cap: int = MAX_KEPT) -> None:
        super().__init__()
        self.cap = cap
        self.dropped = 0

    def append(self, item: T) -> None:
        if len(self) < self.cap:
            super().append(item)
        else:
            self.dropped += 1

    def insert(self, index: SupportsIndex, item: T) -> None:
        if len(self) < self.cap:
            super().insert(index, item)
        else:
            self.dropped += 1
