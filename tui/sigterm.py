"""SIGTERM to a dashboard (in-process or attached): it ends as ``q`` does, so Textual gives the terminal back."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

from textual.app import App

TERM_GRACE_S = 5.0
"""How long a SIGTERM waits for the dashboard's own shutdown before it leaves the hard way."""
RESTORE_TERMINAL = b"\x1b[?1000l\x1b[?1003l\x1b[?1015l\x1b[?1006l\x1b[?2004l\x1b[?1049l\x1b[?25h"
"""Mouse reporting off (every mode Textual turns on), bracketed paste off, the main screen back, the cursor shown."""


def exit_on_sigterm(app: App[Any], hard_exit: Callable[[], None] | None = None) -> Callable[[], None]:
    """SIGTERM ends the dashboard as ``q`` does, so Textual's shutdown gives the terminal back as it found it
    (alternate screen off, mouse reporting off, cursor shown): the default action killed the process and left all
    three on. Should the shutdown not end within :data:`TERM_GRACE_S` (a terminal that takes no more output), the
    restoring bytes are written without blocking and ``hard_exit`` runs (the demo's cleanup, then ``os._exit``).
    Returns the function that puts the previous handler back."""

    def leave() -> None:
        deadline = time.monotonic() + TERM_GRACE_S
        while time.monotonic() < deadline:
            try:
                app.call_from_thread(app.exit)
                break
            except RuntimeError:  # not running yet (a signal during start-up), or already gone
                if app.return_code is not None:
                    return
                time.sleep(0.05)
        while app.is_running and time.monotonic() < deadline:
            time.sleep(0.05)
        if app.is_running:
            _restore_terminal_now()
            if hard_exit is not None:
                hard_exit()
            os._exit(1)

    def on_term(_sig: int, _frame: object) -> None:
        # A handler must return at once: the exit is asked for from a thread (call_from_thread waits for the loop).
        threading.Thread(target=leave, name="sigterm", daemon=True).start()

    previous = signal.signal(signal.SIGTERM, on_term)

    def put_back() -> None:
        signal.signal(signal.SIGTERM, previous)

    return put_back


def _restore_terminal_now() -> None:
    try:
        fd = os.open("/dev/tty", os.O_WRONLY | os.O_NONBLOCK | os.O_NOCTTY)
    except OSError:
        return
    try:
        os.write(fd, RESTORE_TERMINAL)
    except OSError:
        pass
    finally:
        os.close(fd)
