"""Gathering an :class:`ExportState` from the parts of amdtop that exist.

The supervisor, the analysis flags, the probe cache, the ramp results and the RCCL log parser are built by other
modules; each is looked up at run time and skipped when absent or failing, so the exporter always publishes at
least the per-GPU metrics. The TUI calls :func:`enrich` with its own snapshot and workers (no extra device calls).
"""

from __future__ import annotations

import importlib
import json
import logging
from collections.abc import Iterable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from amdtop.exporter.state import ExportState, LinkBandwidth, RampKnee, RcclCounts
from amdtop.model import Flag, NodeSnapshot, Topology, WorkerStatus
from amdtop.telemetry.base import TelemetryBackend

log = logging.getLogger(__name__)
RAMP_DIRS = ("ramp", "ramps")


def optional_module(name: str) -> ModuleType | None:
    """Import ``name`` if that part of amdtop is installed; ``None`` otherwise."""
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def _pair_value(item: Any) -> tuple[int, int, float] | None:
    for key in ("gbps", "gb_s", "bandwidth_gbps", "bw_gbps"):
        value = getattr(item, key, None)
        if value is None and isinstance(item, dict):
            value = item.get(key)
        if value is not None:
            a = item["a"] if isinstance(item, dict) else item.a
            b = item["b"] if isinstance(item, dict) else item.b
            return int(a), int(b), float(value)
    return None


def bandwidth_from_probe(results: Any) -> tuple[LinkBandwidth, ...]:
    """Per-pair GB/s from a probe result, whichever shape the probe uses (pairs list or ``{(a, b): gbps}``)."""
    if results is None:
        return ()
    out: list[LinkBandwidth] = []
    for attr in ("pairs", "links", "results", "gbps"):
        found = getattr(results, attr, None)
        if found is None:
            continue
        items: Iterable[Any] = found.items() if isinstance(found, dict) else found
        for item in items:
            if isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], tuple):
                (a, b), value = item
                if value is not None:
                    out.append(LinkBandwidth(min(a, b), max(a, b), float(value)))
                continue
            triple = _pair_value(item)
            if triple is not None:
                a, b, value = triple
                out.append(LinkBandwidth(min(a, b), max(a, b), value))
        break
    return tuple(out)


def load_bandwidth(state_dir: Path) -> tuple[LinkBandwidth, ...]:
    """Measured bandwidth from the probe cache in ``state_dir``; empty when no probe ran."""
    cache = optional_module("amdtop.probe.cache")
    if cache is None:
        return ()
    try:
        return bandwidth_from_probe(cache.load_results(state_dir))
    except Exception as exc:  # a broken cache must not break the scrape
        log.debug("probe results unreadable: %s", exc)
        return ()


def load_ramp_knees(state_dir: Path) -> tuple[RampKnee, ...]:
    """The newest ramp result (contract ``ramp --json`` shape) per worker under ``state_dir/ramp``."""
    newest: dict[str, tuple[float, RampKnee]] = {}
    for sub in RAMP_DIRS:
        folder = state_dir / sub
        if not folder.is_dir():
            continue
        for path in folder.glob("*.json"):
            try:
                doc = json.loads(path.read_text())
                knee = doc.get("knee") or {}
                concurrency = knee.get("concurrency")
                mtime = path.stat().st_mtime
            except (OSError, ValueError, AttributeError):
                continue
            if not isinstance(concurrency, int | float):
                continue
            worker = str(doc.get("worker") or path.stem)
            when = doc.get("finished_at") or doc.get("timestamp") or mtime
            rec = doc.get("recommended_max_num_seqs")
            value = RampKnee(worker, int(concurrency), int(rec) if isinstance(rec, int | float) else None, float(when))
            if worker not in newest or newest[worker][0] < float(when):
                newest[worker] = (float(when), value)
    return tuple(v for _, v in sorted(newest.values(), key=lambda t: t[1].worker))


class RcclCounter:
    """RCCL error/warning counts and diagnosis flags per worker log; a log is parsed again only when it changed."""

    def __init__(self) -> None:
        """Start with an empty cache."""
        self._cache: dict[str, tuple[tuple[int, float], RcclCounts, tuple[Flag, ...]]] = {}

    def counts(self, workers: Sequence[WorkerStatus], topology: Topology) -> tuple[tuple[RcclCounts, ...], list[Flag]]:
        """Counts and flags for every worker with a log file."""
        parser = optional_module("amdtop.rccl.parser")
        if parser is None:
            return (), []
        diagnose = optional_module("amdtop.rccl.diagnose")
        counts: list[RcclCounts] = []
        flags: list[Flag] = []
        for w in workers:
            if not w.log:
                continue
            path = Path(w.log)
            try:
                st = path.stat()
            except OSError:
                continue
            key = (st.st_size, st.st_mtime)
            cached = self._cache.get(w.name)
            if cached is None or cached[0] != key:
                try:
                    report = parser.parse_files([path])
                    found = tuple(diagnose.diagnose(report, topology)) if diagnose is not None else ()
                    found = tuple(_with_worker(f, w.name) for f in found)
                    result = RcclCounts(w.name, len(report.errors), len(report.warnings))
                except Exception as exc:  # a log the parser chokes on must not break the scrape
                    log.debug("rccl parse of %s failed: %s", path, exc)
                    continue
                cached = (key, result, found)
                self._cache[w.name] = cached
            counts.append(cached[1])
            flags.extend(cached[2])
        return tuple(counts), flags


def _with_worker(flag: Flag, worker: str) -> Flag:
    if flag.worker:
        return flag
    return Flag(flag.kind, flag.message, worker, flag.gpus, flag.metric, flag.spread_pct, flag.extra)


def enrich(
    snapshot: NodeSnapshot,
    workers: Sequence[WorkerStatus],
    flags: Sequence[Flag],
    state_dir: Path | None,
    rccl: RcclCounter | None = None,
) -> ExportState:
    """Add probe, ramp and RCCL facts from ``state_dir`` to what the caller already knows."""
    counts: tuple[RcclCounts, ...] = ()
    all_flags = list(flags)
    if rccl is not None:
        counts, rccl_flags = rccl.counts(workers, snapshot.topology)
        all_flags.extend(rccl_flags)
    return ExportState(
        snapshot=snapshot,
        workers=tuple(workers),
        flags=tuple(all_flags),
        ramp_knees=load_ramp_knees(state_dir) if state_dir is not None else (),
        rccl=counts,
        bandwidth=load_bandwidth(state_dir) if state_dir is not None else (),
    )


class NodeProvider:
    """The headless exporter's provider: poll the backend, then ask each available part for its facts."""

    def __init__(
        self,
        backend: TelemetryBackend,
        *,
        state_dir: Path | None = None,
        proc_root: Path = Path("/proc"),
        supervisor: Any = None,
    ) -> None:
        """``supervisor`` is an ``amdtop.supervisor.Supervisor`` or ``None`` (then vLLM servers are discovered)."""
        self._backend = backend
        self._state_dir = state_dir
        self._proc_root = proc_root
        self._supervisor = supervisor
        self._rccl = RcclCounter()
        analysis = optional_module("amdtop.analysis")
        self._analysis = analysis
        self._tracker: Any = None
        if analysis is not None and hasattr(analysis, "ImbalanceTracker"):
            self._tracker = analysis.ImbalanceTracker(window_s=5.0, threshold_pct=15.0)

    def _workers(self) -> list[WorkerStatus]:
        try:
            if self._supervisor is not None:
                return list(self._supervisor.status())
            if self._analysis is not None and hasattr(self._analysis, "discover_vllm"):
                return list(self._analysis.discover_vllm(self._proc_root))
        except Exception as exc:  # workers are optional facts; the GPU metrics still go out
            log.debug("worker status failed: %s", exc)
        return []

    def _flags(self, snapshot: NodeSnapshot, workers: list[WorkerStatus]) -> list[Flag]:
        flags: list[Flag] = []
        try:
            if self._tracker is not None:
                flags.extend(self._tracker.update(snapshot, workers))
            if self._analysis is not None and hasattr(self._analysis, "numa_flags"):
                flags.extend(self._analysis.numa_flags(snapshot.topology, workers, self._proc_root))
        except Exception as exc:
            log.debug("analysis failed: %s", exc)
        return flags

    def __call__(self) -> ExportState:
        """One poll of the node and everything around it."""
        snapshot = self._backend.sample()
        workers = self._workers()
        return enrich(snapshot, workers, self._flags(snapshot, workers), self._state_dir, self._rccl)
