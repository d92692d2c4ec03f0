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
from urllib.parse import urlsplit

from amdtop.exporter.state import ExportState, LinkBandwidth, RampKnee, RcclCounts
from amdtop.model import Flag, NodeSnapshot, Topology, WorkerStatus
from amdtop.telemetry.base import TelemetryBackend

log = logging.getLogger(__name__)
RAMP_DIRS = ("ramp", "ramps")


_MODULES: dict[str, ModuleType | None] = {}


def optional_module(name: str) -> ModuleType | None:
    """Import ``name`` if that part of amdtop is installed; ``None`` otherwise (answer cached per process)."""
    # Cached because a failed import searches sys.path again each time, which would cost more than the poll.
    if name not in _MODULES:
        try:
            _MODULES[name] = importlib.import_module(name)
        except ImportError:
            _MODULES[name] = None
    return _MODULES[name]


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
    """Per-pair GB/s from a probe result: ``ProbeResults.pair_gbps`` over its GPUs, or a ``pairs``/``gbps`` shape."""
    if results is None:
        return ()
    out: list[LinkBandwidth] = []
    if hasattr(results, "pair_gbps") and hasattr(results, "gpus"):
        gpus = sorted(set(results.gpus))
        for i, a in enumerate(gpus):
            for b in gpus[i + 1 :]:
                value = results.pair_gbps(a, b)
                if value is not None:
                    out.append(LinkBandwidth(a, b, float(value)))
        return tuple(out)
    for attr in ("pairs", "gbps"):
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


def load_probe(state_dir: Path) -> tuple[tuple[LinkBandwidth, ...], tuple[Flag, ...]]:
    """Measured bandwidth and ``link_degraded`` flags from the probe cache; empty when no probe ran."""
    cache = optional_module("amdtop.probe.cache")
    if cache is None:
        return (), ()
    try:
        results = cache.load_results(state_dir)
        flags = tuple(getattr(results, "flags", ()) or ())
        return bandwidth_from_probe(results), flags
    except Exception as exc:  # a broken cache must not break the scrape
        log.debug("probe results unreadable: %s", exc)
        return (), ()


def _origin(url: str | None) -> str | None:
    if not url:
        return None
    parts = urlsplit(url)
    return f"{parts.hostname}:{parts.port}" if parts.port else parts.hostname


def load_ramp_knees(state_dir: Path, workers: Sequence[WorkerStatus] = ()) -> tuple[RampKnee, ...]:
    """The newest ramp result with a knee per worker, from ``state_dir/ramp/*.json`` (``ramp --json`` shape).

    The worker is the document's ``worker`` key, else the worker whose URL the ramp hit, else the ramp's URL.
    """
    by_origin = {_origin(w.url or (f"http://127.0.0.1:{w.port}" if w.port else None)): w.name for w in workers}
    by_origin.pop(None, None)
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
            url = doc.get("url")
            origin = _origin(url) if isinstance(url, str) else None
            worker = str(doc.get("worker") or by_origin.get(origin) or url or path.stem)
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
                    found: tuple[Flag, ...] = ()
                    if diagnose is not None:
                        found = tuple(_with_worker(f, w.name) for f in diagnose.diagnose(report, topology, w.name))
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
    bandwidth: tuple[LinkBandwidth, ...] = ()
    knees: tuple[RampKnee, ...] = ()
    if state_dir is not None:
        bandwidth, probe_flags = load_probe(state_dir)
        all_flags.extend(probe_flags)
        knees = load_ramp_knees(state_dir, workers)
    return ExportState(snapshot, tuple(workers), tuple(all_flags), knees, counts, bandwidth)


class NodeProvider:
    """The headless exporter's provider: poll the backend, then ask each available part for its facts.

    Workers are the supervisor's (when one is given) plus vLLM servers discovered in procfs; the procfs walk is the
    costly part, so it runs every ``discover_every`` polls, as in the TUI.
    """

    def __init__(
        self,
        backend: TelemetryBackend,
        *,
        state_dir: Path | None = None,
        proc_root: Path = Path("/proc"),
        supervisor: Any = None,
        discover_every: int = 5,
        discover: bool = True,
    ) -> None:
        """``supervisor`` is an ``amdtop.supervisor.Supervisor`` or ``None``; ``discover=False`` skips procfs."""
        self._backend = backend
        self._state_dir = state_dir
        self._proc_root = proc_root
        self._supervisor = supervisor
        self._discover_every = max(1, discover_every)
        self._discover = discover
        self._polls = 0
        self._discovered: list[WorkerStatus] = []
        self._rccl = RcclCounter()
        self._analysis = optional_module("amdtop.analysis")
        self._tracker: Any = None
        if self._analysis is not None and hasattr(self._analysis, "ImbalanceTracker"):
            self._tracker = self._analysis.ImbalanceTracker(window_s=5.0, threshold_pct=15.0)

    def _workers(self, snapshot: NodeSnapshot) -> list[WorkerStatus]:
        own: list[WorkerStatus] = []
        try:
            if self._supervisor is not None:
                own = list(self._supervisor.status())
            if self._discover and self._analysis is not None and self._polls % self._discover_every == 0:
                gpu_pids: dict[int, tuple[int, ...]] = {}
                for sample in snapshot.gpus:
                    for proc in sample.processes:
                        gpu_pids[proc.pid] = (*gpu_pids.get(proc.pid, ()), sample.index)
                self._discovered = list(self._analysis.discover_vllm(self._proc_root, gpu_pids))
        except Exception as exc:  # workers are optional facts; the GPU metrics still go out
            log.debug("worker status failed: %s", exc)
        known = {pid for w in own for pid in (*w.pids, w.pid) if pid}
        return own + [w for w in self._discovered if not known.intersection(w.pids)]

    def _flags(self, snapshot: NodeSnapshot, workers: list[WorkerStatus]) -> list[Flag]:
        flags: list[Flag] = []
        try:
            if self._tracker is not None:
                flags.extend(self._tracker.update(snapshot, workers))
            if self._analysis is not None:
                flags.extend(self._analysis.numa_flags(snapshot.topology, workers, self._proc_root))
        except Exception as exc:
            log.debug("analysis failed: %s", exc)
        return flags

    def __call__(self) -> ExportState:
        """One poll of the node and everything around it."""
        snapshot = self._backend.sample()
        workers = self._workers(snapshot)
        self._polls += 1
        return enrich(snapshot, workers, self._flags(snapshot, workers), self._state_dir, self._rccl)
