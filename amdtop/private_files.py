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


def own_file_opener(path: str, flags: int) -> int:
    """:func:`private_opener` for a file amdtop names itself in its state dir (a log, a lock): never through a
    symlink (ELOOP, an OSError), so a link planted there cannot make amdtop write someone else's file."""
    return private_opener(path, flags | os.O_NOFOLLOW)


def write_private(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` atomically (0600 temporary file, then rename); OSError when it cannot (the
    temporary file is removed).

    The temporary file is created new (``O_EXCL | O_NOFOLLOW``: a symlink or a file planted under its name is never
    written through); the rename replaces whatever ``path`` was, a symlink itself rather than its target."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.unlink(missing_ok=True)  # a stale one of a killed run (unlink never follows a link)
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, FILE_MODE)
        with open(fd, "w", encoding="utf-8") as fh:
            os.fchmod(fd, FILE_MODE)  # whatever the umask
            fh.write(text)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def make_private_dirs(path: Path) -> None:
    """``mkdir -p`` with owner-only folders (existing ones are left as they are)."""
    path.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
