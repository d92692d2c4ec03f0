"""A terminal driver whose input thread sleeps until a key arrives.

Textual 8.2.8's ``LinuxDriver.run_input_thread`` wakes ten times a second (``selector.select(0.1)``) for two reasons:
to notice ``exit_event`` and to let a lone Esc time out (``XTermParser.tick``). A dashboard that redraws once a second
paid for those wakeups in every mode. This input thread waits with no timeout unless an escape sequence is pending
(then until the parser's own deadline), and ``exit_event`` wakes it through a pipe when it is set.

It replaces a private method and uses Textual's private parser: :func:`driver_class` imports them inside its guard
and gives this driver only for the Textual version it was written against; anything missing (ImportError,
AttributeError) falls back to Textual's own driver. tests/tui/test_textual_private.py fails, naming the version,
when Textual changes.
"""

from __future__ import annotations

import os
import selectors
import threading
from codecs import getincrementaldecoder
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from textual.driver import Driver

PATCHED_FOR = "8.2.8"
_built: type[Driver] | None = None


class _WakingEvent(threading.Event):
    """An Event that also writes a byte to a pipe when set, so a thread blocked in ``select`` sees it at once."""

    def __init__(self, wake_fd: int) -> None:
        super().__init__()
        self._wake_fd = wake_fd

    def set(self) -> None:
        super().set()
        try:
            os.write(self._wake_fd, b"x")
        except OSError:  # the pipe is full (the thread is waking anyway) or closed (the driver is gone)
            pass


def _build() -> type[Driver]:
    """The driver class, built where Textual's private modules are imported (inside :func:`driver_class`'s guard)."""
    from textual._parser import ParseError
    from textual._time import get_time
    from textual._xterm_parser import XTermParser
    from textual.drivers.linux_driver import LinuxDriver

    class QuietLinuxDriver(LinuxDriver):
        """``LinuxDriver`` with an input thread that sleeps until input, an Esc deadline or exit."""

        def __init__(self, app: Any, **kwargs: Any) -> None:
            super().__init__(app, **kwargs)
            self._wake_read, self._wake_write = os.pipe()
            os.set_blocking(self._wake_read, False)
            os.set_blocking(self._wake_write, False)
            self.exit_event = _WakingEvent(self._wake_write)

        def _drain_wake(self) -> None:
            try:
                while os.read(self._wake_read, 512):
                    pass
            except BlockingIOError:
                pass

        def run_input_thread(self) -> None:
            """Wait for input and dispatch events (Textual's loop, with the timeout it needs instead of 0.1 s)."""
            fileno = self.fileno
            selector = selectors.SelectSelector()
            selector.register(fileno, selectors.EVENT_READ)
            selector.register(self._wake_read, selectors.EVENT_READ)
            parser = XTermParser(self._debug)
            decode = getincrementaldecoder("utf-8")().decode
            try:
                self._drain_wake()
                while not self.exit_event.is_set():
                    deadline = parser._timeout_time  # a pending Esc: Textual's tick() must run when it times out
                    ready = selector.select(None if deadline is None else max(0.0, deadline - get_time()))
                    for key, _mask in ready:
                        if key.fd == self._wake_read:
                            self._drain_wake()
                            continue
                        raw = os.read(fileno, 1024 * 4)
                        if not raw:  # stdin is piped and ended: wait for exit only (Textual's loop spins here)
                            selector.unregister(fileno)
                            continue
                        data = decode(raw)  # "" while a character's bytes are still arriving: feed("") would end the parser
                        for event in parser.feed(data) if data else ():
                            self.process_message(event)
                    for event in parser.tick():
                        self.process_message(event)
            finally:
                selector.close()
                try:
                    for _event in parser.feed(""):
                        pass
                except (EOFError, ParseError):
                    pass

        def close(self) -> None:
            super().close()
            for fd in (self._wake_read, self._wake_write):
                try:
                    os.close(fd)
                except OSError:
                    pass

    return QuietLinuxDriver


def driver_class() -> type[Driver] | None:
    """This driver for the Textual version it was written against; ``None`` (Textual's choice) otherwise, and when
    a private part it needs is gone."""
    global _built
    try:
        if version("textual") != PATCHED_FOR:
            return None
    except PackageNotFoundError:
        return None
    if _built is None:
        try:
            _built = _build()
        except (ImportError, AttributeError):
            return None
    return _built
