"""Reading processes from procfs: NUMA binding, titles, environment markers, trees.

Everything here tolerates processes that exit while being read (returns empty values, never raises).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from amdtop.cpulist import parse_cpulist
from amdtop.sysread import read_text

PROC = Path("/proc")


@dataclass(frozen=True, slots=True)
class ProcBinding:
    """Where a process may run and allocate."""

    pid: int
    """Process id."""
    cpus: tuple[int, ...]
    """``Cpus_allowed_list``."""
    mems: tuple[int, ...]
    """``Mems_allowed_list`` (NUMA nodes)."""


def read_status(pid: int, proc: Path = PROC) -> dict[str, str]:
    """``/proc/PID/status`` as a dict (empty if the process is gone or unreadable)."""
    try:
        text = read_text(proc / str(pid) / "status")
    except OSError:
        return {}
    out: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            out[key.strip()] = value.strip()
    return out


def read_binding(pid: int, proc: Path = PROC) -> ProcBinding | None:
    """CPU and memory binding of ``pid`` from procfs, ``None`` when the process is gone."""
    status = read_status(pid, proc)
    if not status:
        return None
    try:
        cpus = parse_cpulist(status.get("Cpus_allowed_list", ""))
        mems = parse_cpulist(status.get("Mems_allowed_list", ""))
    except ValueError:
        return None
    return ProcBinding(pid, cpus, mems)


def union_binding(pids: Iterable[int], proc: Path = PROC) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The CPUs and memory nodes any of ``pids`` may use (a worker's binding is its processes' together)."""
    cpus: set[int] = set()
    mems: set[int] = set()
    for pid in pids:
        binding = read_binding(pid, proc)
        if binding is not None:
            cpus.update(binding.cpus)
            mems.update(binding.mems)
    return tuple(sorted(cpus)), tuple(sorted(mems))


def read_cmdline(pid: int, proc: Path = PROC) -> tuple[str, ...]:
    """argv of ``pid`` (a process title set by setproctitle shows as one element)."""
    try:
        raw = read_proc_bytes(pid, "cmdline", proc)
    except OSError:
        return ()
    return tuple(part.decode("utf-8", "replace") for part in raw.split(b"\0") if part)


def read_proc_bytes(pid: int, name: str, proc: Path = PROC) -> bytes:
    """``/proc/PID/<name>`` as bytes; ``OSError`` when gone, ``PermissionError`` for another user's process.

    ``os.open``/``os.read`` on a str path: a full walk reads a file per process on the host, and pathlib's
    ``read_text`` cost 3.4x as much (``bench/proc_scan.py``: 48 against 14 ms for 2065 stat files). procfs answers a
    read with all it has up to the buffer, so a short read is the end.
    """
    fd = os.open(f"{proc}/{pid}/{name}", os.O_RDONLY)
    try:
        chunks = [os.read(fd, 65536)]
        while len(chunks[-1]) == 65536:
            chunks.append(os.read(fd, 65536))
    finally:
        os.close(fd)
    return b"".join(chunks)


def read_seq_file(pid: int, name: str, proc: Path = PROC) -> bytes:
    """``/proc/PID/<name>`` for the files the kernel writes through ``seq_file`` a page at a time (``numa_maps``,
    ``smaps``): each read answers at most one page (about 4 KiB) whatever the buffer, so a short read is not the end;
    read until the kernel answers nothing. :func:`read_proc_bytes` gave the audit the first 27 of a Python process's 157
    ``numa_maps`` lines, and of a vLLM worker its first 4 KiB (issue 53)."""
    fd = os.open(f"{proc}/{pid}/{name}", os.O_RDONLY)
    try:
        chunks = []
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
    finally:
        os.close(fd)
    return b"".join(chunks)


def read_environ(pid: int, proc: Path = PROC) -> dict[str, str]:
    """Environment of ``pid`` (empty without permission or when gone)."""
    try:
        raw = read_proc_bytes(pid, "environ", proc)
    except OSError:
        return {}
    env: dict[str, str] = {}
    for item in raw.split(b"\0"):
        key, sep, value = item.partition(b"=")
        if sep:
            env[key.decode("utf-8", "replace")] = value.decode("utf-8", "replace")
    return env


def read_ppid_pgid(pid: int, proc: Path = PROC) -> tuple[int, int] | None:
    """(ppid, pgid) from ``/proc/PID/stat``, ``None`` when gone."""
    try:
        text = read_proc_bytes(pid, "stat", proc).decode("utf-8", "replace")
    except OSError:
        return None
    # comm may contain spaces and parentheses: split after the last ')'.
    fields = text[text.rfind(")") + 2 :].split()
    try:
        return int(fields[1]), int(fields[2])
    except (IndexError, ValueError):
        return None


def start_time(pid: int, proc: Path = PROC) -> float | None:
    """When ``pid`` started (seconds since the epoch): boot time plus its start in clock ticks; ``None`` if gone."""
    try:
        stat = read_text(proc / str(pid) / "stat")
        btime_line = next(line for line in read_text(proc / "stat").splitlines() if line.startswith("btime "))
        ticks = int(stat[stat.rfind(")") + 2 :].split()[19])
        return int(btime_line.split()[1]) + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, StopIteration, IndexError, ValueError):
        return None


def list_pids(proc: Path = PROC) -> list[int]:
    """All numeric entries of procfs."""
    try:
        return sorted(int(name) for name in os.listdir(proc) if name.isdigit())
    except OSError:
        return []


def numa_balancing_enabled(proc: Path = PROC) -> bool | None:
    """State of ``/proc/sys/kernel/numa_balancing`` (``None`` when the kernel has no such knob)."""
    try:
        return read_text(proc / "sys" / "kernel" / "numa_balancing").strip() not in ("", "0")
    except OSError:
        return None


def thread_ids(pid: int, proc: Path = PROC) -> list[int]:
    """The threads of ``pid`` (``/proc/PID/task``); empty when it is gone."""
    try:
        return [int(tid) for tid in os.listdir(f"{proc}/{pid}/task")]
    except OSError:
        return []


def children(pid: int, proc: Path = PROC) -> list[int]:
    """Direct children of ``pid`` from ``/proc/PID/task/*/children`` (each thread lists the children it forked).

    Why not psutil: ``Process.children()`` builds a parent map of every process on the host, a cost that grows with
    the host's process count (bench/proc_walk.py); these files cost one read per thread of the parent, through
    :func:`read_proc_bytes` on a str path (a ``Path`` built per thread was a third of the walk, issue 53 session 25).
    """
    out: list[int] = []
    for tid in thread_ids(pid, proc):
        try:
            raw = read_proc_bytes(pid, f"task/{tid}/children", proc)
        except OSError:
            continue
        out.extend(int(part) for part in raw.split())
    return out


def descendants(roots: set[int], proc: Path = PROC) -> set[int]:
    """``roots`` that are alive plus every process below them."""
    out: set[int] = set()
    stack = [p for p in roots if os.path.exists(f"{proc}/{p}")]
    while stack:
        pid = stack.pop()
        if pid in out:
            continue
        out.add(pid)
        stack.extend(c for c in children(pid, proc) if c not in out)
    return out


def ancestors(pid: int, proc: Path = PROC, limit: int = 64) -> list[int]:
    """Parents of ``pid`` up to (not including) init, nearest first."""
    out: list[int] = []
    current = pid
    for _ in range(limit):
        pp = read_ppid_pgid(current, proc)
        if pp is None or pp[0] <= 1:
            break
        current = pp[0]
        out.append(current)
    return out
