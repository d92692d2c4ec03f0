"""Whether a serve runs for a state dir: the one liveness rule, ``<state-dir>/serve.lock`` and the pid in it.

A serve holds an exclusive ``flock`` on the lock file for its whole life and writes its pid there. The kernel drops
the lock when the process ends, however it ends (SIGKILL included), and keeps it while the process lives, however it
behaves: stopped (SIGSTOP, Ctrl-Z), swapping, or too busy to answer. So "does a serve run here?" is whether the lock
is held, never whether the socket answers in time (a serve that did not answer within 2 s was once taken for dead,
its socket unlinked, and a second serve supervised the same state dir beside it).

The file is opened ``O_CLOEXEC``: a worker the serve starts does not inherit the lock and keep it after the serve.
"""

from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path
from typing import IO

from amdtop.errors import AmdtopError
from amdtop.private_files import own_file_opener

LOCK_NAME = "serve.lock"
PID_WAIT_S = 1.0
"""How long a reader waits for the pid of a serve that took the lock but has not written it yet (microseconds apart)."""
TAKE_WAIT_S = 0.2
"""How long a starting serve retries the lock: a reader's probe holds it shared for a few microseconds."""


def lock_path(state_dir: Path) -> Path:
    return Path(state_dir) / LOCK_NAME


def process_state(pid: int) -> str:
    """A few words on process ``pid`` for a message: ``stopped`` (SIGSTOP, Ctrl-Z: ``kill -CONT`` resumes it),
    ``traced``, ``a zombie``, or ``""`` (running or sleeping, or unknown)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read()
    except OSError:
        return ""
    state = stat[stat.rfind(b")") + 2 : stat.rfind(b")") + 3]
    return {b"T": "stopped", b"t": "traced", b"Z": "a zombie"}.get(state, "")


class ServeLock:
    """The lock a running serve holds (released by :meth:`release` or by the process's end)."""

    def __init__(self, fh: IO[str]) -> None:
        self._fh: IO[str] | None = fh

    def release(self) -> None:
        fh, self._fh = self._fh, None
        if fh is not None:
            fh.close()  # closing the only descriptor of the open file drops the flock


def take(state_dir: Path) -> ServeLock:
    """Take the serve lock of ``state_dir`` and write this pid in it; an :class:`AmdtopError` naming the serve that
    holds it (alive: running, busy or stopped) otherwise."""
    path = lock_path(state_dir)
    try:
        fh = open(path, "a+", encoding="ascii", opener=own_file_opener)  # noqa: SIM115 - held for the serve's life
    except OSError as exc:
        raise AmdtopError(
            f"--state-dir {state_dir}: cannot open {path} ({exc.strerror}); fix its permissions"
        ) from None
    for _ in range(3):  # a holder that ends while we look is looked at again, a few times
        if _lock_within(fh, TAKE_WAIT_S):
            break
        pid = holder(state_dir)
        if pid is not None:
            fh.close()
            raise AmdtopError(f"amdtop serve already runs for {state_dir} ({describe(pid)}); stop it first")
    else:
        fh.close()
        raise AmdtopError(f"--state-dir {state_dir}: {path} stays locked by a process that comes and goes; try again")
    fh.seek(0)
    fh.truncate()
    fh.write(f"{os.getpid()}\n")
    fh.flush()
    return ServeLock(fh)


def _lock_within(fh: IO[str], wait: float) -> bool:
    """Take ``fh``'s exclusive lock, retrying for ``wait`` seconds (a reader's probe holds it for microseconds)."""
    deadline = time.monotonic() + wait
    while True:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.01)


def holder(state_dir: Path) -> int | None:
    """The pid of the serve holding ``state_dir``'s lock (0 when it holds it but its pid cannot be read), ``None``
    when no process holds it (no serve, or a stale socket of one that was killed)."""
    path = lock_path(state_dir)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None  # no lock file (or not a plain one of ours): no serve took it
    with open(fd, "rb") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            pass  # held: a serve lives
        else:
            fcntl.flock(fh, fcntl.LOCK_UN)
            return None
        deadline = time.monotonic() + PID_WAIT_S
        while True:
            fh.seek(0)
            text = fh.read(32).strip()
            if text.isdigit():
                return int(text)
            if time.monotonic() > deadline:
                return 0
            time.sleep(0.01)


def describe(pid: int) -> str:
    """``pid N`` with what the process is doing when that matters to the reader: ``pid N, stopped: kill -CONT N
    resumes it``."""
    if not pid:
        return "pid unknown"
    state = process_state(pid)
    if state == "stopped":
        return f"pid {pid}, stopped: `kill -CONT {pid}` resumes it"
    return f"pid {pid}, {state}" if state else f"pid {pid}"
