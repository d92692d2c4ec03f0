"""Subscriber lists shared by both ends of the service: a subscriber that raises is reported and the others still
get the message (the runtime's rule; the viewer's reader thread used to die of it)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Generic, TypeVar

S = TypeVar("S", bound=Callable[..., Any])


class Hub(Generic[S]):
    """Subscribers of one kind; :meth:`publish` shields each from the others."""

    def __init__(self, what: str) -> None:
        self.what = what
        self._lock = threading.Lock()
        self._subs: tuple[S, ...] = ()

    def add(self, sub: S) -> Callable[[], None]:
        """Add ``sub``; returns its removal."""
        with self._lock:
            self._subs = (*self._subs, sub)

        def remove() -> None:
            with self._lock:
                self._subs = tuple(s for s in self._subs if s is not sub)

        return remove

    def publish(self, *args: Any, on_error: Callable[[str], None] | None = None) -> None:
        """Call every subscriber; one that raises is reported to ``on_error`` (else dropped silently)."""
        for sub in self._subs:
            try:
                sub(*args)
            except Exception as exc:  # one broken subscriber must not starve the others
                if on_error is not None:
                    try:
                        on_error(f"{self.what} subscriber: {exc}")
                    except Exception:
                        pass  # nowhere left to report it

    def __len__(self) -> int:
        return len(self._subs)
