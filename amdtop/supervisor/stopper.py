"""Stopping one run of a worker: SIGTERM the group, grace, SIGKILL the group, sweep leftovers and shared memory."""

from __future__ import annotations

import math
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from amdtop.supervisor import evidence, procs
from amdtop.supervisor.state import WorkerRecord

MAX_GRACE_S = 7 * 24 * 3600.0
"""The longest grace a stop waits (the CLI's --grace and a profile's stop_grace_s refuse more)."""
KILL_WAIT_S = 10.0
"""Everything after the grace (SIGKILL, the sweeps) shares this one deadline: a stop ends within grace + this."""


def bounded_grace(grace: float) -> float:
    """``grace`` made safe to wait on: NaN or negative is no grace, more than :data:`MAX_GRACE_S` (infinity too) is
    :data:`MAX_GRACE_S`. A deadline of ``now + nan`` is never reached: a stop given one used to wait forever."""
    if math.isnan(grace) or grace < 0:
        return 0.0
    return min(grace, MAX_GRACE_S)


@dataclass(frozen=True, slots=True)
class StopReport:
    """What a stop did."""

    name: str
    """Worker name."""
    terminated: tuple[int, ...]
    """PIDs of the process group that got SIGTERM."""
    killed: tuple[int, ...]
    """PIDs still alive after the grace period that got SIGKILL."""
    swept_pids: tuple[int, ...]
    """Leftovers outside the group found by env marker, parent chain or ``VLLM::`` title, and killed."""
    swept_shm: tuple[str, ...]
    """``/dev/shm`` (and temp) files of this launch that were removed."""
    message: str
    """One line for humans."""
    seconds: float = 0.0
    """Wall time of the stop."""
    record_error: str | None = None
    """Why the stop could not record itself in the state file (the CLI exits 1 with it); ``None`` when it did."""


def _signal_group(pgid: int, pids: set[int], sig: signal.Signals) -> None:
    # killpg also reaches members forked since the scan, but as root it would reach another user's process that
    # joined the group too: then only the processes known to be ours are signalled.
    if _group_is_all_ours(pgid):
        try:
            os.killpg(pgid, sig)
        except (ProcessLookupError, PermissionError):
            pass
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def _group_is_all_ours(pgid: int) -> bool:
    uid = os.geteuid()
    return all(evidence.is_own_process(st.pid, uid=uid) for st in procs.scan().values() if st.pgid == pgid)


def _alive_of(pids: set[int]) -> set[int]:
    table = procs.scan()
    return {p for p in pids if p in table}


def _wait_gone(pids: set[int], timeout: float, reap: Callable[[], None]) -> None:
    deadline = time.monotonic() + timeout
    while True:
        reap()
        if not _alive_of(pids) or time.monotonic() >= deadline:
            return
        time.sleep(0.05)


def log_since_launch(rec: WorkerRecord) -> str:
    """The log text this run wrote (the whole file when it was rotated since)."""
    try:
        with open(rec.log, "rb") as fh:
            size = fh.seek(0, os.SEEK_END)
            fh.seek(rec.log_offset if rec.log_offset <= size else 0)
            return fh.read().decode("utf-8", "replace")
    except OSError:
        return ""


def _remove_files(rec: WorkerRecord, mapped: set[str], *, shm_root: Path = procs.SHM_ROOT) -> set[str]:
    """Delete what is provably this launch's: segments its processes mapped (read from procfs before the kill),
    ``vllm_dist_<id>`` files for ids its log named, and SGLang's segments stamped with one of its processes' pids. Segments a state file lists count only when nobody maps them now;
    every path must pass :func:`procs.removable` (vLLM's names, directly in /dev/shm, ours, not older than the launch).
    """
    ids = procs.dist_ids_in(log_since_launch(rec))
    candidates = (
        set(mapped) | procs.shm_for_ids(ids, shm_root) | procs.shm_for_pids({p for p, _ in rec.known}, shm_root)
    )
    recorded = {p for p in rec.shm if p not in candidates}
    busy = procs.shm_in_use() if recorded or candidates else set()
    candidates |= recorded
    removed: set[str] = set()
    for path in sorted(candidates - busy):
        if procs.removable(path, launched_at=rec.started_at, root=shm_root):
            try:
                os.unlink(path)
                removed.add(path)
            except OSError:
                pass
    # vLLM's file-based distributed_init_method: $TMPDIR/vllm_dist_<id>, for ids this run's own log named.
    tmp = Path(os.environ.get("TMPDIR", "/tmp"))
    for i in ids:
        path = str(tmp / f"vllm_dist_{i}")
        if procs.removable(path, launched_at=rec.started_at, root=tmp):
            try:
                os.unlink(path)
                removed.add(path)
            except OSError:
                pass
    return removed


def stop_run(rec: WorkerRecord, grace: float, reap: Callable[[], None] = lambda: None) -> StopReport:
    """Stop the run ``rec`` describes; ``reap`` collects the launched child where this process is its parent.

    Only processes and files tied to this run (see :func:`procs.members`) are signalled or removed.
    """
    t0 = time.monotonic()
    grace = bounded_grace(grace)
    marker = f"{rec.name}:{rec.launch_id}"
    table = procs.scan()
    everyone = procs.members(
        pgid=rec.pgid, start_ticks=rec.start_ticks, marker=marker, known=rec.known, table=table, deep=True
    )
    # Read the mappings before anything dies: afterwards nothing says which segments were this run's.
    shm = set(rec.shm) | procs.mapped_shm(everyone)
    group = {p for p in everyone if table[p].pgid == rec.pgid}
    if group:
        _signal_group(rec.pgid, group, signal.SIGTERM)
    _wait_gone(group, grace, reap)
    kill_deadline = time.monotonic() + KILL_WAIT_S
    left = _alive_of(group)
    if left:
        _signal_group(rec.pgid, left, signal.SIGKILL)
        _wait_gone(left, min(5.0, kill_deadline - time.monotonic()), reap)
    # Sweep: anything still tied to this launch (escaped the group, reparented, or started late).
    swept: set[int] = set()
    for _ in range(3):
        if time.monotonic() >= kill_deadline:
            break
        rest = procs.members(pgid=rec.pgid, start_ticks=rec.start_ticks, marker=marker, known=rec.known, deep=True)
        if not rest:
            break
        swept |= rest
        for pid in rest:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        _wait_gone(rest, min(5.0, kill_deadline - time.monotonic()), reap)
    removed = _remove_files(rec, shm)
    reap()
    secs = time.monotonic() - t0
    msg = (
        f"{rec.name}: stopped in {secs:.1f} s; {len(group)} terminated, {len(left)} killed after {grace:g} s grace, "
        f"{len(swept)} leftover process(es) swept, {len(removed)} shm file(s) removed"
    )
    return StopReport(
        rec.name, tuple(sorted(group)), tuple(sorted(left)), tuple(sorted(swept)), tuple(sorted(removed)), msg, secs
    )
