"""Subscriber lists shared by every end of the service (the runtime's frames, a viewer's frames, ramps and the serve
going away): a subscriber that raises is shielded (the others still get the message, the thread publishing goes on)
and reported once, on the error channel and in the log; it stays subscribed.

One rule for both ends: the runtime used to report a broken subscriber on every tick, and the viewer's reader thread
died of one (the viewer then said "serve closed the connection").
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any, Generic, TypeVar

S = TypeVar("S", bound=Callable[..., Any])

log = logging.getLogger("amdtop.service")


class Hub(Generic[S]):
    """Subscribers of one kind; :meth:`publish` shields each from the others."""

    def __init__(self, what: str) -> None:
        self.what = what
        self._lock = threading.Lock()
        self._subs: tuple[S, ...] = ()
        self._reported: set[int] = set()
        """``id`` of each subscriber whose failure was reported (it is not reported again)."""
        self.failures = 0
        """Subscriber calls that raised, reported or not."""

    def add(self, sub: S) -> Callable[[], None]:
        """Add ``sub``; returns its removal."""
        with self._lock:
            self._subs = (*self._subs, sub)

        def remove() -> None:
            with self._lock:
                self._subs = tuple(s for s in self._subs if s is not sub)
                self._reported.discard(id(sub))

        return remove

    def publish(self, *args: Any, on_error: Callable[[str], None] | None = None) -> None:
        """Call every subscriber; the first failure of each is logged and reported to ``on_error``."""
        for sub in self._subs:
            try:
                sub(*args)
            except Exception as exc:  # one broken subscriber must not starve the others nor stop the publisher
                self._failed(sub, exc, on_error)

    def _failed(self, sub: S, exc: Exception, on_error: Callable[[str], None] | None) -> None:
        with self._lock:
            self.failures += 1
            if id(sub) in self._reported:
                return
            self._reported.add(id(sub))
        text = f"{self.what} subscriber: {exc}"
        log.warning("%s (reported once; it stays subscribed)", text, exc_info=exc)
        if on_error is not None:
            try:
                on_error(text)
            except Exception:
                pass  # nowhere left to report it

    def __len__(self) -> int:
        return len(self._subs)
