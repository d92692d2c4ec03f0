"""Output that cannot fail on a character: text read from the system may hold U+FFFD (see amdtop.sysread) or any
other character a non-UTF-8 terminal (``LANG=en_US.ISO-8859-1``, ``PYTHONIOENCODING=ascii``) cannot encode."""

from __future__ import annotations

import io
import sys


def tolerant_output() -> None:
    """Make stdout and stderr replace what their encoding cannot hold (``?``) instead of raising mid-print."""
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper) and stream.errors == "strict":
            stream.reconfigure(errors="replace")
