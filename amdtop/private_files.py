"""Files amdtop writes in its state dir: owner-only (0600) whatever the umask, written atomically.

They name URLs, launch lines, environments and results: only their owner should read them. ``open(path, "w")`` and
``Path.write_text`` create files with the process umask (0644 under the usual 022), so every writer in the state dir
goes through here.
"""

from __future__ import annotations

import os
from pathlib import Path

FILE_MODE = 0o600
DIR_MODE = 0o700


def private_opener(path: str, flags: int) -> int:
    """An ``open(..., opener=)`` that creates the file 0600 (and narrows an existing wider one)."""
    fd = os.open(path, flags | os.O_CLOEXEC, FILE_MODE)
    try:
        if os.fstat(fd).st_mode & 0o077:
            os.fchmod(fd, FILE_MODE)
    except OSError:
        pass
    return fd


def write_private(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` atomically (0600 temporary file, then rename); OSError when it cannot (the
    temporary file is removed)."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "w", encoding="utf-8", opener=private_opener) as fh:
            fh.write(text)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def make_private_dirs(path: Path) -> None:
    """``mkdir -p`` with owner-only folders (existing ones are left as they are)."""
    path.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
