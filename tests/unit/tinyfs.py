"""A real, tiny tmpfs for full-disk tests (skips with the reason where mounting is refused)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


@contextmanager
def tiny_tmpfs(mnt: Path, size: str = "64k") -> Iterator[Path]:
    """Mount a ``size`` tmpfs on ``mnt`` for the block; ``pytest.skip`` where this machine does not allow it."""
    mnt.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mnt)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a {size} tmpfs here ({done.stderr.decode().strip() or 'not root'})")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def fill(folder: Path, leave_pages: int = 0) -> None:
    """Fill the file system of ``folder`` with 4 KiB files until it is full, then free ``leave_pages`` of them."""
    n = 0
    while True:
        try:
            (folder / f"filler{n}").write_bytes(b"x" * 4096)
        except OSError:
            (folder / f"filler{n}").unlink(missing_ok=True)
            break
        n += 1
    for i in range(leave_pages):
        (folder / f"filler{n - 1 - i}").unlink()
