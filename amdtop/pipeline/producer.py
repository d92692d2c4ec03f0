"""The producer: one backend poll plus workers, logs and analyses become one :class:`NodeFrame` per tick.

:class:`NodePipeline` is plain Python, called from one thread at a time (the TUI's poller thread, the exporter's
scrape, the snapshot command). Other threads talk to it only through :meth:`NodePipeline.request_workers`, an Event.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol

from amdtop.analysis import (
    ImbalanceTracker,
    VllmDiscovery,
    numa_flags,
    tp_placement_flags,
    worker_binding,
)
from amdtop.analysis.imbalance import GroupJudgement
from amdtop.analysis.tp_groups import live_groups, per_group
from amdtop.audit.auditor import Auditor
from amdtop.audit.model import AuditReport
from amdtop.control import DemoLoad
from amdtop.gpuprocs import NoHost, ProcessHost, ProcessTable
from amdtop.health.ecc import DEFAULT_WINDOW_S as ECC_WINDOW_S
from amdtop.health.report import HealthWindow
from amdtop.health.stall import StallTracker
from amdtop.health.traffic import FabricTraffic, group_traffic, latest_traffic
from amdtop.hip_devices import physical_worker
from amdtop.logread.kernel.monitor import KernelFaultMonitor, KernelUpdate
from amdtop.logread.rccl.monitor import LogMonitor, LogUpdate
from amdtop.model import Flag, FlagKind, NodeSnapshot, WorkerState, WorkerStatus
from amdtop.partition_groups import partition_split_flags
from amdtop.pipeline.found import FoundReader
from amdtop.pipeline.frame import GpuHistory, LinkBandwidth, LogCounts, NodeFrame, RampKnee, TpGroup
from amdtop.pipeline.owners import device_owners
from amdtop.pipeline.series import Series
from amdtop.pipeline.statefiles import load_probe, load_ramp_knees, state_stamp
from amdtop.procinfo import PROC, numa_balancing_enabled
from amdtop.telemetry.base import TelemetryBackend
from amdtop.thresholds import (
    HISTORY_POINTS,
    REDISCOVER_EVERY_S,
    STATE_FILES_EVERY_S,
    TP_SPREAD_THRESHOLD_PCT,
    TP_WINDOW_S,
    WORKERS_EVERY_S,
)

_NO_HISTORY = (Series(), Series(), Series())
"""A GPU's series before its first point (:meth:`Series.then` copies out of an empty window, never into it)."""


class WorkerSource(Protocol):
    """Where amdtop's own workers come from: the supervisor (or a test double of it)."""

    def status(self) -> list[WorkerStatus]: ...


def _dedupe(flags: Sequence[Flag]) -> tuple[Flag, ...]:
    # Keyed on identity fields, not the whole value: two sources may report one problem.
    seen: dict[tuple[object, ...], Flag] = {}
    for flag in flags:
        seen.setdefault((flag.kind, flag.worker, flag.gpus, flag.metric, flag.message), flag)
    return tuple(seen.values())


def _gpu_pids(snap: NodeSnapshot) -> dict[int, tuple[int, ...]]:
    out: dict[int, tuple[int, ...]] = {}
    for sample in snap.gpus:
        for proc in sample.processes:
            if proc.pid > 0:
                out[proc.pid] = (*out.get(proc.pid, ()), sample.index)
    return out


class NodePipeline:
    """Builds frames. Cadences: the backend every tick; amdtop's workers every ``workers_every_s`` (or at once
    after :meth:`request_workers`); discovered servers from the GPU processes' trees, with a full procfs walk every
    ``rediscover_every_s``; the state dir's probe and ramp files when they change."""

    def __init__(
        self,
        backend: TelemetryBackend,
        workers: WorkerSource | None = None,
        *,
        proc_root: Path = PROC,
        discover: bool = True,
        monitor: LogMonitor | None = None,
        follow_logs: bool = False,
        state_dir: Path | None = None,
        demo_load: DemoLoad | None = None,
        window_s: float = TP_WINDOW_S,
        threshold_pct: float = TP_SPREAD_THRESHOLD_PCT,
        workers_every_s: float = WORKERS_EVERY_S,
        rediscover_every_s: float = REDISCOVER_EVERY_S,
        history_points: int = HISTORY_POINTS,
        clock: Callable[[], float] = time.monotonic,
        kernel: KernelFaultMonitor | None = None,
        wall_clock: Callable[[], float] = time.time,
        host_procs: ProcessHost | None = None,
        auditor: Auditor | None = None,
        processes_every_s: float = 0.0,
        found: FoundReader | None = None,
    ) -> None:
        """``follow_logs`` tails the workers' log files with a :class:`LogMonitor` (unless ``monitor`` is given);
        ``kernel`` reads the kernel log for GPU faults; ``found`` reads the discovered servers (by default a
        :class:`FoundReader` at the workers' cadence)."""
        self.backend = backend
        self.workers = workers
        self.proc_root = proc_root
        self.tracker = ImbalanceTracker(window_s, threshold_pct)
        self.discovery = (
            VllmDiscovery(proc_root, full_every_s=rediscover_every_s, clock=clock, trees_every_s=processes_every_s)
            if discover
            else None
        )
        self.found = (
            found or FoundReader(every_s=workers_every_s, clock=clock, proc_root=proc_root) if discover else None
        )
        self.state_dir = state_dir
        self.demo_load = demo_load
        self.workers_every_s = workers_every_s
        self.clock = clock
        self._history_points = history_points
        self._history: dict[int, tuple[Series, Series, Series]] = {}
        self._history_counts: dict[int, int] = {}
        """Points appended per GPU so far (``GpuHistory.points``)."""
        self._refresh = threading.Event()
        self._refresh.set()
        self._files_refresh = threading.Event()
        self._own: list[WorkerStatus] = []
        self._own_at = 0.0
        self._own_error: str | None = None
        self._last_workers: tuple[WorkerStatus, ...] = ()
        self._balancing: bool | None = None
        self._balancing_at: float | None = None
        self._files_at: float | None = None
        self._files_stamp: tuple[float, ...] = ()
        self._bandwidth: tuple[LinkBandwidth, ...] = ()
        self._probe_flags: tuple[Flag, ...] = ()
        self._knees: tuple[RampKnee, ...] = ()
        self._tick = 0
        # Counters (throttle residency, ECC, fabric traffic) are judged over the last minute of snapshots.
        self._snaps: deque[NodeSnapshot] = deque()
        self._health = HealthWindow()
        self.stalls = StallTracker(clock=clock)
        self.monitor = monitor
        if monitor is None and follow_logs:
            self.monitor = LogMonitor(self._log_sources, backend.topology())
        self.kernel = kernel
        self.wall_clock = wall_clock
        # Host facts of the GPU processes come from this host's /proc; a captured proc tree has none to give.
        if host_procs is None and proc_root != PROC:
            host_procs = NoHost()
        # The host facts of GPU processes on their own cadence (0: every tick), see ProcessTable.
        self.processes = ProcessTable(host_procs, every_s=processes_every_s, clock=clock)
        self.auditor = auditor

    # -- requests from other threads ----------------------------------------------------------------------------
    def request_workers(self) -> None:
        """Refresh amdtop's workers on the next tick (a control action changed them); safe from any thread."""
        self._refresh.set()
        self.request_processes()  # a launched rank's row at once, a stopped one's gone
        if self.auditor is not None:
            self.auditor.request()

    def request_processes(self) -> None:
        """Read the GPU process lists on the next tick, where the backend reads them on a slower cadence (the launch
        gate judges a frame ticked for it: a worker stopped a moment ago must not still hold its GPU there); safe from
        any thread."""
        request = getattr(self.backend, "request_processes", None)
        if callable(request):
            request()

    def request_state_files(self) -> None:
        """Re-read the probe and ramp results on the next tick (one was just written); safe from any thread."""
        self._files_refresh.set()

    # -- parts --------------------------------------------------------------------------------------------------
    def _log_sources(self) -> list[tuple[str, Path]]:
        # From the last worker list, so ranks that start later are picked up without another status call.
        # A found server's stderr, where it is a file apart from its stdout's, is followed as well.
        return [(w.name, Path(path)) for w in self._last_workers for path in (w.log, *w.other_logs) if path]

    def _own_workers(self, now: float) -> list[WorkerStatus]:
        if self.workers is None:
            return []
        if self._refresh.is_set() or now - self._own_at >= self.workers_every_s:
            self._refresh.clear()
            self._own_at = now
            try:
                self._own = list(self.workers.status())
                self._own_error = None
            except Exception as exc:  # a broken supervisor must not stop telemetry: the frame says what failed
                self._own_error = f"workers: {exc}"
        return self._own

    def _worker_list(self, snap: NodeSnapshot, now: float) -> list[WorkerStatus]:
        own = self._own_workers(now)
        if self.discovery is None:
            return own
        known = {pid for w in own for pid in (*w.pids, w.pid) if pid}
        found = [w for w in self.discovery.find(_gpu_pids(snap)) if not known.intersection(w.pids)]
        return own + (self.found.read(found) if self.found is not None else found)

    def _record_history(self, snap: NodeSnapshot) -> tuple[GpuHistory, ...]:
        n = self._history_points
        for sample in snap.gpus:
            util, vram, power = self._history.get(sample.index) or _NO_HISTORY
            self._history[sample.index] = (
                util.then(sample.util_pct, n),
                vram.then(sample.vram_pct, n),
                power.then(sample.power_w, n),
            )
            self._history_counts[sample.index] = self._history_counts.get(sample.index, 0) + 1
        return tuple(
            GpuHistory(index, u, v, p, self._history_counts[index])
            for index, (u, v, p) in sorted(self._history.items())
        )

    def _numa_balancing(self, now: float) -> bool | None:
        if self._balancing_at is None or now - self._balancing_at >= REDISCOVER_EVERY_S:
            self._balancing_at = now
            self._balancing = numa_balancing_enabled(self.proc_root)
        return self._balancing

    def _state_files(self, now: float, workers: Sequence[WorkerStatus]) -> None:
        if self.state_dir is None:
            return
        due = self._files_at is None or now - self._files_at >= STATE_FILES_EVERY_S
        if not due and not self._files_refresh.is_set():
            return
        self._files_refresh.clear()
        self._files_at = now
        stamp = state_stamp(self.state_dir)
        if stamp == self._files_stamp:
            return
        self._files_stamp = stamp
        self._bandwidth, self._probe_flags = load_probe(self.state_dir)
        self._knees = load_ramp_knees(self.state_dir, workers)

    def _logs(self) -> tuple[LogUpdate | None, tuple[LogCounts, ...], str | None]:
        if self.monitor is None:
            return None, (), None
        try:
            update = self.monitor.poll()
        except OSError as exc:  # a log that cannot be read must not stop telemetry: the frame says so
            return None, (), f"logs: {exc}"
        counts = tuple(LogCounts(worker, errors, warnings) for worker, errors, warnings in update.counts())
        return update, counts, None

    def _kernel(self, snap: NodeSnapshot, workers: Sequence[WorkerStatus]) -> tuple[KernelUpdate | None, str | None]:
        if self.kernel is None:
            return None, None
        try:
            update = self.kernel.poll(snap.topology, workers)
        except Exception as exc:  # a broken kernel-log reader must not stop telemetry: the frame says what failed
            return None, f"kernel log: {exc}"
        return update, update.new_note

    def _remember(self, snap: NodeSnapshot) -> list[NodeSnapshot]:
        self._snaps.append(snap)
        while len(self._snaps) > 2 and snap.timestamp - self._snaps[0].timestamp > ECC_WINDOW_S:
            self._snaps.popleft()
        return list(self._snaps)

    @staticmethod
    def _group(
        judgement: GroupJudgement, flags: Sequence[Flag], fabric: FabricTraffic | None, devices: tuple[int, ...]
    ) -> TpGroup:
        util = judgement.mean_of("util_pct")
        return TpGroup(
            worker=judgement.worker,
            gpus=judgement.gpus,
            util_spread_pct=judgement.spread("util_pct"),
            vram_spread_pct=judgement.spread("vram_used_bytes"),
            util_mean_pct=sum(util.values()) / len(util) if util else None,
            util_means=tuple(sorted(util.items())),
            window_s=judgement.window_s,
            samples=judgement.samples,
            imbalanced=any(
                f.kind is FlagKind.TP_IMBALANCE and f.worker == judgement.worker and f.gpus == judgement.gpus
                for f in flags
            ),
            lost_gpus=judgement.lost,
            devices=devices,
            traffic=None if fabric is None else group_traffic(fabric, judgement.gpus),
            dp_rank=judgement.dp_rank,
        )

    def _audit(
        self, snap: NodeSnapshot, workers: Sequence[WorkerStatus], flags: Sequence[Flag]
    ) -> tuple[AuditReport | None, str | None]:
        if self.auditor is None:
            return None, None
        try:
            return self.auditor.maybe_run(snap, workers, flags), None
        except Exception as exc:  # the audit must not stop telemetry: the frame says what failed
            return None, f"audit: {exc}"

    # -- the tick -----------------------------------------------------------------------------------------------
    def tick(self) -> NodeFrame:
        """Poll the backend and everything around it once."""
        now = self.clock()
        if self.demo_load is not None:
            # The simulated GPUs carry the workers' load from the first sample: `workers launch` then `snapshot
            # --json` showed every demo GPU idle (the load was set only after the sample it should have shaped).
            # Later ticks refeed the last tick's statuses, so that a worker that exited since is dropped from the
            # sample (feed_demand checks each pid) rather than listed one tick longer, dead, with its VRAM.
            self.demo_load(self._own_workers(now) if self._tick == 0 else self._last_workers)
        snap = self.backend.sample()
        workers = self._worker_list(snap, now)
        self._last_workers = tuple(workers)
        if self.demo_load is not None:
            self.demo_load(workers)
        self._tick += 1
        history = self._record_history(snap)
        bindings = {w.name: worker_binding(w, self.proc_root) for w in workers if w.gpus}
        # On a partitioned node workers name HIP devices; the per-GPU analyses work on the physical GPUs under them.
        physical = [physical_worker(w, snap.topology) for w in workers]
        self.tracker.add(snap)
        # One judgement per TP group: a data-parallel worker's replicas are judged apart (amdtop/layout.py).
        judgements = self.tracker.judge_groups(live_groups(workers, snap.topology))
        flags: list[Flag] = list(snap.flags)
        for judgement in judgements:
            flags += self.tracker.flags_of(judgement)
        flags += numa_flags(
            snap.topology, physical, self.proc_root, bindings=bindings, balancing=self._numa_balancing(now)
        )
        running = [w for w in workers if w.state is not WorkerState.STOPPED]
        flags += per_group(
            tp_placement_flags, snap.topology, [p for p in physical if p.state is not WorkerState.STOPPED]
        )
        flags += partition_split_flags(snap.topology, running)
        snaps = self._remember(snap)
        throttle, health = self._health.judge(snaps)
        flags += health
        fabric = latest_traffic(snaps)
        logs, counts, log_error = self._logs()
        if logs is not None:
            flags += logs.flags
        self._state_files(now, workers)
        flags += self._probe_flags
        kernel, kernel_error = self._kernel(snap, workers)
        if kernel is not None:
            flags += kernel.flags
        flags += self.stalls.judge(workers, snap)
        all_flags = _dedupe(flags)
        devices = {(g.worker, g.dp_rank if g.first_rank else 0): g.gpus for w in workers for g in w.tp_groups()}
        audit, audit_error = self._audit(snap, workers, all_flags)
        errors = tuple(e for e in (self._own_error, log_error, kernel_error, audit_error) if e)
        procs, totals = self.processes.rows(snap, workers, physical)
        return NodeFrame(
            snapshot=snap,
            workers=tuple(workers),
            flags=all_flags,
            groups=tuple(
                self._group(j, all_flags, fabric, devices.get((j.worker, j.dp_rank or 0), j.gpus)) for j in judgements
            ),
            bindings=tuple((name, b) for name, b in bindings.items()),
            history=history,
            logs=logs,
            log_counts=counts,
            bandwidth=self._bandwidth,
            ramp_knees=self._knees,
            fabric=fabric,
            throttle=tuple(throttle),
            errors=errors,
            tick=self._tick,
            kernel_log=None if kernel is None else kernel.status,
            made_at=self.wall_clock(),
            physical_workers=tuple(physical),
            gpu_owners=device_owners(physical),
            hip_owners=device_owners(workers),
            processes=procs,
            process_totals=totals,
            audit=audit,
        )

    def close(self) -> None:
        """Close the log files and the process reader's descriptors (the backend belongs to the caller)."""
        if self.monitor is not None:
            self.monitor.close()
        if self.kernel is not None:
            self.kernel.close()
        self.processes.close()
        if self.found is not None:
            self.found.close()
