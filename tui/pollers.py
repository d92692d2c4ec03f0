"""The telemetry poller: one pass builds one :class:`Frame` (backend sample, workers, analysis, logs).

:class:`Poller` is plain Python so tests can step it synchronously; :func:`poll_loop` runs it inside ONE long-lived
thread worker that waits on an Event between polls, so polls never overlap and quitting interrupts the wait at once.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from amdtop.analysis import ImbalanceTracker, discover_vllm, numa_flags, topology_group_flags, worker_binding
from amdtop.model import WorkerStatus
from amdtop.rccl.monitor import LogMonitor
from amdtop.telemetry.base import TelemetryBackend
from tui.frame import Frame

HISTORY = 24  # sparkline points per GPU


class WorkerSource(Protocol):
    """Where the dashboard's own workers come from (the supervisor, or a fake in tests)."""

    def status(self) -> list[WorkerStatus]: ...


class Poller:
    """Builds frames; only ever called from one thread at a time."""

    def __init__(
        self,
        backend: TelemetryBackend,
        workers: WorkerSource | None = None,
        *,
        proc_root: Path = Path("/proc"),
        window_s: float = 5.0,
        threshold_pct: float = 15.0,
        discover: bool = True,
        discover_every: int = 5,
        log_follower: Any = None,
        workers_every_s: float = 2.0,
    ) -> None:
        self.backend = backend
        self.workers = workers
        self.proc_root = proc_root
        self.tracker = ImbalanceTracker(window_s, threshold_pct)
        self.discover = discover
        self.discover_every = max(1, discover_every)
        self.log_follower = log_follower
        self._history: dict[int, deque[float]] = {}
        self._discovered: list[WorkerStatus] = []
        self._ticks = 0
        self.last_error: str | None = None
        self.last_workers: tuple[WorkerStatus, ...] = ()
        # Worker status walks procfs and calls each server over HTTP: every 2 s is enough (nvitop polls processes
        # every 2 s too); a control action forces the next poll to refresh it.
        self.workers_every_s = workers_every_s
        self.force_workers = True
        self._own: list[WorkerStatus] = []
        self._own_at = 0.0

    def follow_logs(self) -> None:
        """Tail the workers' log files; the monitor also parses them (communicator summary, transport fallbacks)."""

        def sources() -> list[tuple[str, Path]]:
            # From the last worker list, so ranks that start later are picked up without another status call.
            return [(w.name, Path(w.log)) for w in self.last_workers if w.log]

        self.log_follower = LogMonitor(sources, self.backend.topology())

    def _worker_list(self, gpu_pids: dict[int, tuple[int, ...]]) -> list[WorkerStatus]:
        now = time.monotonic()
        if self.workers is not None and (self.force_workers or now - self._own_at >= self.workers_every_s):
            self.force_workers = False
            self._own_at = now
            try:
                self._own = list(self.workers.status())
                self.last_error = None
            except Exception as exc:  # a broken supervisor must not stop telemetry
                self.last_error = f"workers: {exc}"
        own = self._own
        if self.discover and self._ticks % self.discover_every == 0:
            # Walking /proc is the costly part of a poll: do it every few ticks only.
            self._discovered = discover_vllm(self.proc_root, gpu_pids)
        known = {pid for w in own for pid in (*w.pids, w.pid) if pid}
        found = [w for w in self._discovered if not known.intersection(w.pids)]
        return own + found

    def tick(self) -> Frame:
        snap = self.backend.sample()
        gpu_pids: dict[int, tuple[int, ...]] = {}
        for sample in snap.gpus:
            for proc in sample.processes:
                gpu_pids[proc.pid] = (*gpu_pids.get(proc.pid, ()), sample.index)
        workers = self._worker_list(gpu_pids)
        self.last_workers = tuple(workers)
        self._ticks += 1
        for sample in snap.gpus:
            hist = self._history.setdefault(sample.index, deque(maxlen=HISTORY))
            hist.append(0.0 if sample.util_pct is None else sample.util_pct)
        flags = list(snap.flags)
        flags += self.tracker.update(snap, workers)
        flags += numa_flags(snap.topology, workers, self.proc_root)
        lines: tuple[object, ...] = ()
        dropped = 0
        summary = None
        if self.log_follower is not None:
            try:
                batch = self.log_follower.poll()
                lines = tuple(batch.lines)
                dropped = int(getattr(batch, "dropped_count", 0) or 0)
                summary = getattr(batch, "summary", None)
                flags += [f for f in getattr(batch, "flags", ()) if f not in flags]
            except Exception:  # log tail trouble never stops the dashboard
                pass
        return Frame(
            snapshot=snap,
            workers=tuple(workers),
            flags=tuple(flags),
            group_warnings=tuple(topology_group_flags(snap.topology, workers)),
            bindings=tuple((w.name, worker_binding(w, self.proc_root)) for w in workers),
            history=tuple((i, tuple(h)) for i, h in sorted(self._history.items())),
            log_lines=lines,
            log_dropped=dropped,
            log_summary=summary,
        )


def poll_loop(
    poller: Poller,
    interval: Callable[[], float],
    stop: threading.Event,
    deliver: Callable[[Frame], None],
    cancelled: Callable[[], bool],
) -> None:
    """Poll until ``stop`` is set: deliver a frame, then wait ``interval()`` seconds (interruptible)."""
    while not stop.is_set() and not cancelled():
        try:
            frame = poller.tick()
        except Exception as exc:  # keep polling: a transient backend error should not freeze the screen
            poller.last_error = f"poll: {exc}"
        else:
            if not cancelled():
                deliver(frame)
        stop.wait(interval())
