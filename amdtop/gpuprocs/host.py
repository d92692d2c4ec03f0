"""Host facts of the processes on the GPUs (user, command, start, CPU %, RSS), read for those pids only.

psutil identifies a process the first time it is seen on a GPU, and again every :data:`IDENTITY_EVERY_S` (a title
set later by setproctitle shows up), in one ``oneshot()``: user (real uid), argv, start time and RSS. Between those,
a tick reads the process's CPU clock (``clock_gettime`` on the clock ``clock_getcpuclockid`` names: the utime+stime
total of ``/proc/PID/stat`` in nanoseconds, without the kernel formatting 52 fields) and RSS from
``/proc/PID/statm`` (what psutil's ``memory_info`` reads) through a descriptor kept open for the process: a ``pread``
of ``statm`` costs a third of one of ``stat``, and both together half (bench/gpu_procs.py; docs/benchmarks.md). A
descriptor of a ``/proc/PID`` file stays bound to the process it was opened for: once that process exits the read
fails with ESRCH. The clock is read before the descriptor, so a read that succeeds proves the clock was the same
process's, and a reused pid is never taken for the process identified before. A pid whose clock cannot be read (a
thread id rather than a process's) falls back to ``/proc/PID/stat`` for both numbers. The host is never walked.
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
_NS = 1_000_000_000


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
    """Open descriptor of the process's ``statm`` (``stat`` where ``clock`` is ``None``); -1 past :data:`KEEP_FDS`:
    opened per read."""
    identified_at: float
    cpu_ticks: int
    read_at: float
    clock: int | None
    """The process's CPU clock id; ``None``: CPU time from ``/proc/PID/stat``."""


KEEP_FDS = 512
"""Processes whose descriptor is kept open; past that, each read opens and closes the file."""


_pread = os.pread
_clock_ns = time.clock_gettime_ns


def _cpu_clock(pid: int) -> int:
    """The id ``clock_getcpuclockid(pid)`` returns (Python has no binding): the kernel's
    ``MAKE_PROCESS_CPUCLOCK(pid, CPUCLOCK_SCHED)``, the whole thread group's CPU time."""
    return ((~pid) << 3) | 2


def _read_path(pid: int, name: str) -> bytes:
    """``/proc/PID/<name>`` opened, read and closed (past :data:`KEEP_FDS`); OSError once the process is gone."""
    fd = os.open(f"/proc/{pid}/{name}", os.O_RDONLY)
    try:
        return os.read(fd, 1024)
    finally:
        os.close(fd)


def _stat_sample(data: bytes) -> tuple[int, int]:
    """(utime+stime ticks, rss pages) of a ``/proc/PID/stat`` text; IndexError or ValueError when it is cut short."""
    # comm may hold spaces and parentheses: the fields start after the last ')'. Only the first 22 are needed.
    fields = data[data.rfind(b")") + 2 :].split(None, 22)
    return int(fields[11]) + int(fields[12]), int(fields[21])


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

    def _identify(self, pid: int) -> tuple[HostInfo, int] | None:
        """psutil's facts and its CPU ticks (utime+stime), or ``None`` when the process is gone or hidden."""
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
        command = mask_command_line(argv) if argv else f"[{name}]"
        self._procs[pid] = proc
        info = HostInfo(pid, self._user(uid), uid, command, started, None, rss)
        return info, round((times.user + times.system) * _TICKS)

    def _track(self, pid: int, info: HostInfo, ticks: int, now: float) -> _Known | None:
        """A first-seen process: its descriptor opened, its CPU baseline taken."""
        clock: int | None = None if self._psutil_every_tick else _cpu_clock(pid)
        if clock is not None:
            try:
                _clock_ns(clock)
            except OSError:
                clock = None  # no process clock under this pid (a thread id): stat, as psutil read it
        fd = -1
        try:
            if len(self._known) < KEEP_FDS:
                fd = os.open(f"/proc/{pid}/{'stat' if clock is None else 'statm'}", os.O_RDONLY)
            if clock is not None:
                # After the open: the first tick's read through the descriptor vouches for this baseline too.
                ticks = _clock_ns(clock) * _TICKS // _NS
        except OSError:
            if fd >= 0:
                os.close(fd)
            return None  # gone
        return _Known(info, fd, now, ticks, now, clock)

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
        # The steady tick is a clock read and a pread per process. The loop stays flat (no helper calls, locals for
        # what it looks up): at 64 processes Python's calls cost about as much as the system calls.
        for pid in pids:
            if pid <= 0 or pid in out:
                continue
            known = known_by_pid.get(pid)
            if known is None or now - known.identified_at >= IDENTITY_EVERY_S:
                fresh = self._identify(pid)
                if known is None:
                    new = None if fresh is None else self._track(pid, *fresh, now)
                    if new is None:
                        self._forget(pid)
                    else:
                        known_by_pid[pid] = new
                        out[pid] = new.info
                    continue
                if fresh is None:
                    self._forget(pid)
                    continue
                # Same process (its descriptor still reads): keep the CPU baseline so the percentage goes on.
                known.info, known.identified_at = fresh[0], now
            if every_tick:
                sample = self._psutil_sample(pid)
                if sample is None:
                    self._forget(pid)
                    continue
                cpu_ticks, rss_pages = sample
            else:
                clock, fd = known.clock, known.fd
                try:
                    if clock is not None:
                        # Clock first, descriptor second: see the module's docstring. Ticks as stat counts them.
                        cpu_ticks = _clock_ns(clock) * _TICKS // _NS
                        rss_pages = int((_pread(fd, 256, 0) if fd >= 0 else _read_path(pid, "statm")).split(None, 2)[1])
                    else:
                        cpu_ticks, rss_pages = _stat_sample(_pread(fd, 1024, 0) if fd >= 0 else _read_path(pid, "stat"))
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
