"""One viewer's wakes of the node (``wake``, ``request_state_files``): at most one per gap, the rest coalesced.

A wake costs the node a tick and a pass over every worker, so one viewer wakes it at most once a gap. A wake that
comes sooner is held, not answered at once: the wakes held in one gap run as one wake at its end (the strongest op
held: ``request_state_files`` wakes too) and are then answered together. Before, a wake inside the gap was answered at
once and did nothing: a viewer calling ``wake`` in a loop got an answer per round trip and kept the serve's reading
thread, its writer and its pickling busy, about a third of a core on the dev VM for nothing (docs/benchmarks.md,
issue 53); and a second control action within the gap of the first was not shown until the next interval's frame.
Held wakes count against the viewer's calls in flight (:class:`~amdtop.serve.limits.CallBudget`), so a viewer that
sends them without waiting for the answers is dropped at that bound, as for any call.
"""

from __future__ import annotations

import threading

QUEUED = -1.0
""":meth:`WakeGate.offer`'s answer for a call held beside others: their release is already scheduled."""
STRONGER = "request_state_files"
"""Of the held ops, the one that does what the other does and more (a pass over the state files, then a tick)."""


class WakeGate:
    """The wakes of one viewer: free once a gap, held (and coalesced) in between."""

    def __init__(self, gap: float) -> None:
        self.gap = gap
        self._lock = threading.Lock()
        self._woke_at: float | None = None
        self._held: list[tuple[object, str]] = []
        self._timer: threading.Timer | None = None
        self._closed = False

    def offer(self, call_id: object, op: str, now: float) -> float | None:
        """``None``: wake now (counted as this gap's wake). Otherwise the call is held: :data:`QUEUED` when a release
        is already due, else (the first held in this gap) the seconds until it is due: the caller schedules
        :meth:`release` then."""
        with self._lock:
            if not self._held and (self._woke_at is None or now - self._woke_at >= self.gap):
                self._woke_at = now
                return None
            self._held.append((call_id, op))
            if len(self._held) > 1 or self._woke_at is None:
                return QUEUED
            return max(self._woke_at + self.gap - now, 0.0)

    def schedule(self, release: threading.Timer) -> None:
        """Keep the timer that releases this gap's held wakes (cancelled by :meth:`close`)."""
        with self._lock:
            if self._closed:
                return
            self._timer = release
        release.start()

    def release(self, now: float) -> tuple[str | None, list[object]]:
        """Take the held wakes (due now): the op to run once for them all (``None`` when none were held, or closed)
        and their call ids, each to be answered with its result. Counts as this gap's wake."""
        with self._lock:
            held, self._held, self._timer = self._held, [], None
            if not held or self._closed:
                return None, [call_id for call_id, _ in held]
            self._woke_at = now
        op = STRONGER if any(o == STRONGER for _, o in held) else held[0][1]
        return op, [call_id for call_id, _ in held]

    def close(self) -> int:
        """The viewer went away: no held wake runs; returns how many were held (their places in the budget)."""
        with self._lock:
            self._closed = True
            timer, self._timer = self._timer, None
            held, self._held = len(self._held), []
        if timer is not None:
            timer.cancel()
        return held

    @property
    def held(self) -> int:
        with self._lock:
            return len(self._held)
