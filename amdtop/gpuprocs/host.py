"""Host facts of the processes on the GPUs (user, command, start, CPU %, RSS), read for those pids only.

psutil identifies a process the first time it is seen on a GPU, and again every :data:`IDENTITY_EVERY_S` (a title
set later by setproctitle shows up), in one ``oneshot()``: user (real uid), argv, start time, CPU times and RSS.
Between those, a tick reads the one file psutil would parse for CPU and RSS, ``/proc/PID/stat`` (one ``os.read``),
because psutil's per-call layers cost ~30 µs a process (bench/gpu_procs.py: 64 processes, psutil oneshot every tick
against one stat read; docs/benchmarks.md). The start time read there also tells a reused pid from the process
identified before. The whole host is never walked.
"""

from __future__ import annotations

import os
import pwd
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Protocol

import psutil

from amdtop.secrets import mask_command_line

IDENTITY_EVERY_S = 10.0
"""How often psutil re-reads a known process's user and command."""
_TICKS = os.sysconf("SC_CLK_TCK")
_PAGE = os.sysconf("SC_PAGE_SIZE")


@dataclass(frozen=True, slots=True)
class HostInfo:
    """What the host says about one process."""

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
    start_ticks: int
    identified_at: float
    cpu_ticks: int
    read_at: float


def _stat(pid: int) -> tuple[int, int, int] | None:
    """(utime+stime ticks, start ticks, rss pages) from ``/proc/PID/stat``; ``None`` when gone."""
    try:
        fd = os.open(f"/proc/{pid}/stat", os.O_RDONLY)
    except OSError:
        return None
    try:
        data = os.read(fd, 4096)
    except OSError:
        return None
    finally:
        os.close(fd)
    # comm may hold spaces and parentheses: the fields start after the last ')'.
    fields = data[data.rfind(b")") + 2 :].split()
    try:
        return int(fields[11]) + int(fields[12]), int(fields[19]), int(fields[21])
    except (IndexError, ValueError):
        return None


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

    def _identify(self, pid: int, now: float) -> _Known | None:
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
                rss = proc.memory_info().rss
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            return None
        stat = _stat(pid)
        if stat is None:
            return None
        command = mask_command_line(argv) if argv else f"[{name}]"
        info = HostInfo(pid, self._user(uid), uid, command, started, None, rss)
        self._procs[pid] = proc
        return _Known(info, stat[1], now, stat[0], now)

    def read(self, pids: Collection[int]) -> dict[int, HostInfo]:
        """Facts for each live pid of ``pids``."""
        now = self._clock()
        out: dict[int, HostInfo] = {}
        for pid in pids:
            if pid <= 0 or pid in out:
                continue
            known = self._known.get(pid)
            sample = self._psutil_sample(pid) if self._psutil_every_tick and known is not None else _stat(pid)
            if sample is None:
                self._known.pop(pid, None)
                continue
            cpu_ticks, start_ticks, rss_pages = sample
            if known is None or known.start_ticks != start_ticks or now - known.identified_at >= IDENTITY_EVERY_S:
                fresh = self._identify(pid, now)
                if fresh is None:
                    self._known.pop(pid, None)
                    continue
                if known is not None and known.start_ticks == fresh.start_ticks:
                    # Same process: keep its CPU baseline so the percentage does not blank for a tick.
                    fresh.cpu_ticks, fresh.read_at = known.cpu_ticks, known.read_at
                else:
                    self._known[pid] = fresh
                    out[pid] = fresh.info
                    continue
                known = fresh
            elapsed = now - known.read_at
            cpu = 100.0 * (cpu_ticks - known.cpu_ticks) / _TICKS / elapsed if elapsed > 0 else None
            info = HostInfo(
                pid, known.info.user, known.info.uid, known.info.command, known.info.started_at,
                None if cpu is None else max(0.0, round(cpu, 1)), rss_pages * _PAGE,
            )  # fmt: skip
            known.info, known.cpu_ticks, known.read_at = info, cpu_ticks, now
            self._known[pid] = known
            out[pid] = info
        if len(self._known) > len(out):
            for gone in [p for p in self._known if p not in out]:
                del self._known[gone]
                self._procs.pop(gone, None)
        return out

    def _psutil_sample(self, pid: int) -> tuple[int, int, int] | None:
        proc, known = self._procs.get(pid), self._known.get(pid)
        if proc is None or known is None:
            return None
        try:
            with proc.oneshot():
                times = proc.cpu_times()
                rss = proc.memory_info().rss
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            return None
        return round((times.user + times.system) * _TICKS), known.start_ticks, rss // _PAGE
