"""Host facts of the processes on the GPUs (user, command, start, CPU %, RSS), read for those pids only.

psutil identifies a process the first time it is seen on a GPU, and again every :data:`IDENTITY_EVERY_S` (a title
set later by setproctitle shows up), in one ``oneshot()``: user (real uid), argv, start time and RSS. Between those,
a tick reads CPU time and RSS from ``/proc/PID/stat`` through a descriptor kept open for the process: one
``pread`` a tick, where psutil's layers (and an open and a close) cost 3-4x as much (bench/gpu_procs.py;
docs/benchmarks.md). A descriptor of ``/proc/PID/stat`` stays bound to the process it was opened for: once that
process exits the read fails with ESRCH, so a reused pid is never taken for the process identified before. The host
is never walked.
"""

from __future__ import annotations

import os
import pwd
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import NamedTuple, Protocol

import psutil

from amdtop.secrets import mask_command_line

IDENTITY_EVERY_S = 10.0
"""How often psutil re-reads a known process's user and command."""
_TICKS = os.sysconf("SC_CLK_TCK")
_PAGE = os.sysconf("SC_PAGE_SIZE")


class HostInfo(NamedTuple):
    """What the host says about one process (a NamedTuple: built each tick per process, 5x faster than a frozen
    dataclass)."""

    pid: int
    """Process id."""
    user: str | None = None
    """Login name of the real uid (the uid as text where no name is known)."""
    uid: int | None = None
    """Real uid."""
    command: str | None = None
    """argv joined with spaces, secrets masked (the name in brackets when argv is empty)."""
    started_at: float | None = None
    """Start time, seconds since the epoch."""
    cpu_pct: float | None = None
    """CPU use since the last read, percent of one CPU (``None`` at the first read)."""
    rss_bytes: int | None = None
    """Resident set size."""


class ProcessHost(Protocol):
    """Where the pipeline gets host facts for the pids on GPUs (:class:`HostProcs`, or a fixed table in tests)."""

    def read(self, pids: Collection[int]) -> dict[int, HostInfo]:
        """Facts for each live pid of ``pids`` (gone or unreadable ones are left out)."""
        ...


class NoHost:
    """No host facts: the pipeline reads a captured proc tree, not this host's processes."""

    def read(self, pids: Collection[int]) -> dict[int, HostInfo]:
        """Nothing for any pid."""
        return {}


@dataclass(slots=True)
class _Known:
    info: HostInfo
    fd: int
    """Open descriptor of the process's ``/proc/PID/stat`` (-1 past :data:`KEEP_FDS`: opened per read)."""
    identified_at: float
    cpu_ticks: int
    read_at: float


KEEP_FDS = 512
"""Processes whose stat descriptor is kept open; past that, each read opens and closes the file."""


_pread = os.pread


def _read_path(pid: int) -> bytes:
    """``/proc/PID/stat`` opened, read and closed (past :data:`KEEP_FDS`); OSError once the process is gone."""
    fd = os.open(f"/proc/{pid}/stat", os.O_RDONLY)
    try:
        return os.read(fd, 1024)
    finally:
        os.close(fd)


class HostProcs:
    """Reads :class:`HostInfo` for the pids asked for; keeps what it needs for CPU % between reads."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, *, psutil_every_tick: bool = False) -> None:
        """``psutil_every_tick`` reads CPU and RSS through psutil's oneshot on every tick (the bench's comparison)."""
        self._clock = clock
        self._psutil_every_tick = psutil_every_tick
        self._known: dict[int, _Known] = {}
        self._users: dict[int, str] = {}
        self._procs: dict[int, psutil.Process] = {}

    def _user(self, uid: int) -> str:
        name = self._users.get(uid)
        if name is None:
            try:
                name = pwd.getpwuid(uid).pw_name
            except KeyError:
                name = str(uid)  # a uid from a container or a deleted account
            self._users[uid] = name
        return name

    def _identify(self, pid: int, now: float, fd: int) -> _Known | None:
        try:
            proc = psutil.Process(pid)
            with proc.oneshot():
                uid = proc.uids().real
                try:
                    argv = proc.cmdline()
                except psutil.AccessDenied:
                    argv = []
                name = proc.name()
                started = proc.create_time()
                times = proc.cpu_times()
                rss = proc.memory_info().rss
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            return None
        if fd < 0 and len(self._known) < KEEP_FDS:
            try:
                fd = os.open(f"/proc/{pid}/stat", os.O_RDONLY)
            except OSError:
                return None
        command = mask_command_line(argv) if argv else f"[{name}]"
        info = HostInfo(pid, self._user(uid), uid, command, started, None, rss)
        self._procs[pid] = proc
        return _Known(info, fd, now, round((times.user + times.system) * _TICKS), now)

    def _forget(self, pid: int) -> None:
        known = self._known.pop(pid, None)
        self._procs.pop(pid, None)
        if known is not None and known.fd >= 0:
            os.close(known.fd)

    def read(self, pids: Collection[int]) -> dict[int, HostInfo]:
        """Facts for each live pid of ``pids``."""
        now = self._clock()
        out: dict[int, HostInfo] = {}
        known_by_pid = self._known
        every_tick = self._psutil_every_tick
        # The steady tick is one pread and a parse per process. The loop stays flat (no helper calls, locals for
        # what it looks up): at 64 processes Python's calls cost as much as the system calls (docs/benchmarks.md).
        for pid in pids:
            if pid <= 0 or pid in out:
                continue
            known = known_by_pid.get(pid)
            if known is None or now - known.identified_at >= IDENTITY_EVERY_S:
                fresh = self._identify(pid, now, -1 if known is None else known.fd)
                if fresh is None:
                    self._forget(pid)
                    continue
                if known is None:
                    known_by_pid[pid] = fresh
                    out[pid] = fresh.info
                    continue
                # Same process (its descriptor still reads): keep the CPU baseline so the percentage goes on.
                known.info, known.identified_at = fresh.info, now
            if every_tick:
                sample = self._psutil_sample(pid)
                if sample is None:
                    self._forget(pid)
                    continue
                cpu_ticks, rss_pages = sample
            else:
                fd = known.fd
                try:
                    data = _pread(fd, 1024, 0) if fd >= 0 else _read_path(pid)
                    # comm may hold spaces and parentheses: the fields start after the last ')'.
                    fields = data[data.rfind(b")") + 2 :].split(None, 22)
                    cpu_ticks = int(fields[11]) + int(fields[12])
                    rss_pages = int(fields[21])
                except (OSError, IndexError, ValueError):
                    # ESRCH: the process the descriptor was opened for has exited (or the text came short).
                    self._forget(pid)
                    continue
            elapsed = now - known.read_at
            info = known.info
            cpu = max(0.0, round(100.0 * (cpu_ticks - known.cpu_ticks) / _TICKS / elapsed, 1)) if elapsed > 0 else None
            rss = rss_pages * _PAGE
            if cpu is None or cpu != info.cpu_pct or rss != info.rss_bytes:
                # Only CPU and RSS move between identifications: the facts are rebuilt when one of them did.
                info = known.info = HostInfo(pid, info.user, info.uid, info.command, info.started_at, cpu, rss)
            known.cpu_ticks, known.read_at = cpu_ticks, now
            out[pid] = info
        if len(known_by_pid) > len(out):
            for gone in [p for p in known_by_pid if p not in out]:
                self._forget(gone)
        return out

    def close(self) -> None:
        """Close the kept descriptors."""
        for pid in list(self._known):
            self._forget(pid)

    def _psutil_sample(self, pid: int) -> tuple[int, int] | None:
        proc = self._procs.get(pid)
        if proc is None:
            return None
        try:
            with proc.oneshot():
                times = proc.cpu_times()
                rss = proc.memory_info().rss
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            return None
        return round((times.user + times.system) * _TICKS), rss // _PAGE
