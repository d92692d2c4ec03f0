"""One row per process per GPU (or partition): what the backend says, what the host says, and who owns it.

The owner answers "whose process is this": one of amdtop's workers with its TP rank, a vLLM server found running
(``vllm-<pid>``), or ``foreign``. The total per GPU sets the memory the processes hold against the memory in use;
the difference is memory no live process holds (driver reservations, or a leftover of a process that died).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from amdtop.gpuprocs.host import HostInfo, HostProcs, ProcessHost
from amdtop.hip_devices import physical_worker
from amdtop.model import NodeSnapshot, WorkerState, WorkerStatus

FOREIGN = "foreign"
"""Owner of a process that is neither amdtop's worker nor a discovered vLLM server."""
_NOBODY: tuple[str, str, dict[int, int]] = (FOREIGN, FOREIGN, {})


class ProcessRow(NamedTuple):
    """A process holding memory on one GPU (or one partition of it).

    A NamedTuple rather than a frozen dataclass: just as immutable, and built 6x faster (a frozen dataclass sets each
    of its 17 fields through ``object.__setattr__``: 3.7 against 0.6 µs, a quarter of a 64-process tick).
    """

    gpu: int
    """Physical GPU index."""
    pid: int
    """Host PID (0 where the backend could not map it into this PID namespace)."""
    name: str | None
    """Process name from the backend (``comm``)."""
    vram_bytes: int | None
    """GPU memory the process holds on this GPU."""
    partition: int | None = None
    """Compute partition, ``None`` on an unpartitioned GPU."""
    gpu_util_pct: float | None = None
    """The process's share of the GPU's engines, 0-100; ``None`` where the backend gives none per process."""
    user: str | None = None
    """Login name of the process's real uid."""
    uid: int | None = None
    """Real uid."""
    cpu_pct: float | None = None
    """CPU use over the last interval, percent of one CPU."""
    rss_bytes: int | None = None
    """Resident set size in host memory."""
    elapsed_s: float | None = None
    """Seconds since the process started."""
    started_at: float | None = None
    """Start time, seconds since the epoch (tells a reused pid from this process)."""
    command: str | None = None
    """Command line, secrets masked."""
    owner: str = FOREIGN
    """Worker name (amdtop's or ``vllm-<pid>``), or ``foreign``."""
    owner_kind: str = FOREIGN
    """``worker`` (amdtop launched it), ``vllm`` (discovered) or ``foreign``."""
    rank: int | None = None
    """TP rank within the owner, where known."""

    @property
    def key(self) -> str:
        """Stable row key: GPU, partition and pid."""
        part = "" if self.partition is None else f".{self.partition}"
        return f"p-{self.gpu}{part}-{self.pid}"

    @property
    def owner_label(self) -> str:
        """``llama-a/r1``, ``vllm-4242`` or ``foreign``."""
        return self.owner if self.rank is None else f"{self.owner}/r{self.rank}"


@dataclass(frozen=True, slots=True)
class GpuProcessTotal:
    """Memory the processes of one GPU hold against the memory in use."""

    gpu: int
    """Physical GPU index."""
    processes: int
    """Process rows on the GPU."""
    held_bytes: int | None
    """Sum of the processes' memory (``None`` when no process gave a number)."""
    used_bytes: int | None
    """Memory in use on the GPU, as the backend reports it."""

    @property
    def unheld_bytes(self) -> int | None:
        """Memory in use that no live process holds (never negative)."""
        if self.used_bytes is None:
            return None
        return max(0, self.used_bytes - (self.held_bytes or 0))


def _owners(
    snap: NodeSnapshot, workers: Sequence[WorkerStatus], physical: Sequence[WorkerStatus] | None = None
) -> tuple[dict[int, tuple[str, str, dict[int, int]]], dict[int, int]]:
    """pid -> (owner, kind, {gpu: rank}) and pid -> rank from the workers' rank pids. ``physical``: the same workers
    on their physical GPUs as the pipeline mapped them for the frame (mapped here when not given)."""
    owners: dict[int, tuple[str, str, dict[int, int]]] = {}
    ranks: dict[int, int] = {}
    for i, w in enumerate(workers):
        if w.state is WorkerState.STOPPED and not w.pids:
            continue
        kind = "worker" if w.source == "amdtop" else "vllm"
        gpus = physical[i].gpus if physical is not None else physical_worker(w, snap.topology).gpus
        by_gpu = {g: r for r, g in enumerate(gpus)}
        for rank, pid in w.rank_pids:
            ranks.setdefault(pid, rank)
        for pid in (*w.pids, *(p for _, p in w.rank_pids), *((w.pid,) if w.pid else ())):
            if pid > 0:
                owners.setdefault(pid, (w.name, kind, by_gpu))
    return owners, ranks


def build_rows(
    snap: NodeSnapshot,
    workers: Sequence[WorkerStatus],
    host: Mapping[int, HostInfo],
    physical: Sequence[WorkerStatus] | None = None,
    now: float | None = None,
) -> tuple[tuple[ProcessRow, ...], tuple[GpuProcessTotal, ...]]:
    """Rows in GPU order, biggest memory first within a GPU, and one total per GPU that is not lost. Elapsed times
    are taken at ``now`` (default: the snapshot's time)."""
    owners, ranks = _owners(snap, workers, physical)
    rows: list[ProcessRow] = []
    totals: list[GpuProcessTotal] = []
    if now is None:
        now = snap.timestamp
    host_get, owner_get, rank_get = host.get, owners.get, ranks.get
    for sample in snap.gpus:
        if sample.lost:
            continue
        gpu = sample.index
        held: int | None = None
        here: list[ProcessRow] = []
        # Each row is built once, owner included (a _replace afterwards builds it twice through Python's _make).
        for p in sample.processes:
            pid, vram = p.pid, p.vram_bytes
            owner, kind, by_gpu = owner_get(pid, _NOBODY)
            rank = None if kind == FOREIGN else rank_get(pid, by_gpu.get(gpu))
            info = host_get(pid)
            if info is None:
                row = ProcessRow(
                    gpu, pid, p.name, vram, p.partition, p.gpu_util_pct, None, None, None, None, None, None, None,
                    owner, kind, rank,
                )  # fmt: skip
            else:
                started = info.started_at
                row = ProcessRow(
                    gpu, pid, p.name, vram, p.partition, p.gpu_util_pct, info.user, info.uid, info.cpu_pct,
                    info.rss_bytes, None if started is None else max(0.0, now - started), started, info.command,
                    owner, kind, rank,
                )  # fmt: skip
            here.append(row)
            if vram is not None:
                held = (held or 0) + vram
        if len(here) > 1:
            here.sort(key=_order)
        rows += here
        totals.append(GpuProcessTotal(gpu, len(here), held, sample.vram_used_bytes))
    return tuple(rows), tuple(totals)


def _order(r: ProcessRow) -> tuple[int, int, int]:
    """Biggest memory first, then partition, then pid."""
    return -(r.vram_bytes or 0), r.partition or 0, r.pid


def gpu_pids(snap: NodeSnapshot) -> list[int]:
    """Every pid the backend lists on a GPU, once, in first-seen order."""
    seen: dict[int, None] = {}
    for sample in snap.gpus:
        for p in sample.processes:
            if p.pid > 0:
                seen.setdefault(p.pid, None)
    return list(seen)


class ProcessTable:
    """The pipeline's part: host facts for the pids on GPUs, joined with the backend's rows and the workers.

    With ``every_s`` > 0 the host facts (CPU, RSS, command line: a /proc read per process) are read when the pids
    change, when the backend read its process lists anew (``NodeSnapshot.processes_at``), or every ``every_s``; in
    between the rows repeat, elapsed times included (taken at the reading), and rows equal to the last tick's are
    the last tick's tuple, so a view or the wire's delta can tell "unchanged" by identity."""

    def __init__(
        self, host: ProcessHost | None = None, every_s: float = 0.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        """Read host facts from ``host`` (default: the live host through psutil)."""
        self.host: ProcessHost = host if host is not None else HostProcs()
        self.every_s = every_s
        self.clock = clock
        self._pids: list[int] | None = None
        self._info: dict[int, HostInfo] = {}
        self._read_at = 0.0
        self._wall = 0.0
        self._procs_at: float | None = None
        self._last: tuple[tuple[ProcessRow, ...], tuple[GpuProcessTotal, ...]] = ((), ())

    def rows(
        self, snap: NodeSnapshot, workers: Sequence[WorkerStatus], physical: Sequence[WorkerStatus] | None = None
    ) -> tuple[tuple[ProcessRow, ...], tuple[GpuProcessTotal, ...]]:
        """One tick's rows and totals (``physical``: the workers on their physical GPUs, as the frame holds them)."""
        pids = gpu_pids(snap)
        if self.every_s <= 0:
            return build_rows(snap, workers, self.host.read(pids), physical)
        now = self.clock()
        if pids != self._pids or snap.processes_at != self._procs_at or now - self._read_at >= self.every_s:
            self._info = self.host.read(pids)
            self._pids, self._procs_at, self._read_at = pids, snap.processes_at, now
            self._wall = snap.timestamp if snap.processes_at is None else snap.processes_at
        rows, totals = build_rows(snap, workers, self._info, physical, now=self._wall)
        last_rows, last_totals = self._last
        self._last = (last_rows if rows == last_rows else rows, last_totals if totals == last_totals else totals)
        return self._last

    def close(self) -> None:
        """Release what the host reader keeps open (its stat descriptors)."""
        close = getattr(self.host, "close", None)
        if callable(close):
            close()
