"""Reading text the system hands us (sysfs, /proc, files other programs write): never a ``UnicodeDecodeError``.

A driver, a firmware string (``product_name``), a process name or another user's environment can hold any byte. One
undecodable byte must cost that character (shown as U+FFFD), not the command: every text read of a system file goes
through here, decoded as UTF-8 whatever the locale says.
"""

from __future__ import annotations

import os

ENCODING = "utf-8"


def decode(data: bytes) -> str:
    """``data`` as text; undecodable bytes become U+FFFD."""
    return data.decode(ENCODING, "replace")


def read_text(path: str | os.PathLike[str]) -> str:
    """The whole file as text; OSError as ``open`` raises it, never a decode error."""
    with open(path, "rb") as fh:
        return decode(fh.read())


def read_text_or_none(path: str | os.PathLike[str]) -> str | None:
    """The file's text stripped of surrounding whitespace; ``None`` when it cannot be read."""
    try:
        return read_text(path).strip()
    except OSError:
        return None
