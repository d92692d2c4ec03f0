"""The metric families: names, types, labels and units, and how one :class:`~amdtop.pipeline.NodeFrame` fills them.

Per-GPU families use the names and units of AMD's device-metrics-exporter (``gpu_gfx_activity`` in percent,
``gpu_used_vram`` in MB, ``gpu_package_power`` in W...) so existing dashboards and alerts work unchanged; what only
amdtop knows is under ``amdtop_``. A value the backend cannot give is left out, never published as 0.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from amdtop.gpuprocs.report import memory_series
from amdtop.logread.incidents.model import KINDS as INCIDENT_KINDS
from amdtop.model import Flag, FlagKind, GpuInfo, GpuSample, NodeSnapshot, WorkerState, WorkerStatus
from amdtop.pipeline.frame import NodeFrame, TpGroup

if TYPE_CHECKING:
    from prometheus_client.core import Metric

MB = 1024 * 1024  # the AMD exporter's "MB" is amdsmi's MiB
GPU_LABELS = ("gpu_id", "hostname", "card_model", "serial_number")
PAIR_LABELS = ("hostname", "gpu_a", "gpu_b")
WORKER_LABELS = ("hostname", "worker")


@dataclass(frozen=True, slots=True)
class FamilySpec:
    """One metric family as published."""

    name: str
    """Name without the ``_total`` a counter gets on the wire."""
    kind: str
    """``gauge`` or ``counter``."""
    labels: tuple[str, ...]
    """Label names, in order."""
    unit: str
    """Unit (``percent``, ``MB``, ``W``, ``C``, ``MHz``, ``bytes/s``, ``1`` for 0/1 and counts...)."""
    help: str
    """HELP text (without the unit, which is appended)."""


def _g(name: str, labels: tuple[str, ...], unit: str, text: str) -> FamilySpec:
    return FamilySpec(name, "gauge", labels, unit, text)


FAMILIES: dict[str, FamilySpec] = {
    s.name: s
    for s in (
        _g("gpu_gfx_activity", GPU_LABELS, "percent", "Graphics/compute engine activity"),
        _g("gpu_umc_activity", GPU_LABELS, "percent", "Memory controller activity"),
        _g("gpu_used_vram", GPU_LABELS, "MB", "VRAM in use"),
        _g("gpu_total_vram", GPU_LABELS, "MB", "Total VRAM"),
        _g("gpu_free_vram", GPU_LABELS, "MB", "VRAM free"),
        _g("gpu_package_power", GPU_LABELS, "W", "Package/socket power"),
        _g("gpu_junction_temperature", GPU_LABELS, "C", "Hottest sensor (junction on AMD, core on NVIDIA)"),
        _g("gpu_memory_temperature", GPU_LABELS, "C", "Memory (HBM) temperature"),
        _g("gpu_clock", (*GPU_LABELS, "clock_type"), "MHz", "Current clock"),
        _g("amdtop_gpu_power_cap_watts", GPU_LABELS, "W", "Power cap"),
        _g(
            "amdtop_gpu_info",
            (*GPU_LABELS, "bdf", "numa_node", "vendor"),
            "1",
            "Static facts about a GPU (always 1)",
        ),
        _g("amdtop_gpu_lost", GPU_LABELS, "1", "1 when the GPU stopped answering"),
        _g(
            "amdtop_gpu_partition_mode_info",
            (*GPU_LABELS, "compute_partition_type", "memory_partition_type"),
            "1",
            "Compute/memory partition mode of a GPU (always 1; the AMD exporter's GPU_*_PARTITION_TYPE)",
        ),
        _g(
            "amdtop_gpu_partition_info",
            (*GPU_LABELS, "partition_id", "hip_index", "kfd_node", "render_minor", "numa_node"),
            "1",
            "A compute partition of a GPU: its HIP device index, KFD node and render node (always 1)",
        ),
        _g("amdtop_link_info", (*PAIR_LABELS, "type", "hops", "weight"), "1", "Link between two GPUs (always 1)"),
        _g("amdtop_link_max_bandwidth_bytes_per_second", PAIR_LABELS, "bytes/s", "Driver-reported peak bandwidth"),
        _g("amdtop_link_measured_bandwidth_bytes_per_second", PAIR_LABELS, "bytes/s", "Bandwidth the probe measured"),
        _g("amdtop_tp_spread_percent", (*WORKER_LABELS, "metric"), "percent", "TP-group spread (max-min)/max"),
        _g("amdtop_tp_imbalance", WORKER_LABELS, "1", "1 while the TP group is flagged imbalanced"),
        _g("amdtop_numa_mismatch", WORKER_LABELS, "1", "1 while the worker runs off its GPUs' NUMA node"),
        _g("amdtop_transport_fallback", WORKER_LABELS, "1", "1 while RCCL/NCCL fell back to a slower transport"),
        _g("amdtop_flags", ("hostname", "kind"), "1", "Active flags by kind"),
        _g(
            "amdtop_flag_active",
            ("hostname", "kind", "worker", "gpus", "rank"),
            "1",
            "1 per active flag (see the TUI or snapshot --json for its message)",
        ),
        _g("amdtop_rccl_errors", WORKER_LABELS, "1", "Error lines in the worker's RCCL/NCCL log"),
        _g(
            "amdtop_incidents",
            ("hostname", "kind", "historic"),
            "1",
            "Incidents in the frame by kind (one per hang, fabric failure, crash, reset; historic: read from before "
            "amdtop started)",
        ),
        _g("amdtop_rccl_warnings", WORKER_LABELS, "1", "Warning lines in the worker's RCCL/NCCL log"),
        _g("amdtop_worker_state", (*WORKER_LABELS, "state"), "1", "1 for the worker's current state"),
        _g("amdtop_worker_ready", WORKER_LABELS, "1", "1 when the worker serves requests"),
        FamilySpec("amdtop_worker_restarts", "counter", WORKER_LABELS, "1", "Restarts since first launch"),
        _g("amdtop_worker_info", (*WORKER_LABELS, "source", "gpus", "numa_node", "port"), "1", "Worker facts"),
        _g("amdtop_ramp_knee_concurrency", WORKER_LABELS, "1", "Concurrency at the last ramp's knee"),
        _g("amdtop_ramp_recommended_max_num_seqs", WORKER_LABELS, "1", "max-num-seqs the last ramp recommended"),
        _g("amdtop_ramp_timestamp_seconds", WORKER_LABELS, "s", "When the last ramp finished"),
        _g("gpu_xgmi_link_rx", (*GPU_LABELS, "link", "peer_bdf"), "KB", "Accumulated fabric link data read"),
        _g("gpu_xgmi_link_tx", (*GPU_LABELS, "link", "peer_bdf"), "KB", "Accumulated fabric link data written"),
        _g(
            "amdtop_fabric_traffic_bytes_per_second",
            (*PAIR_LABELS, "direction"),
            "bytes/s",
            "Live XGMI/NVLink traffic GPU gpu_a counted to gpu_b over the last poll interval",
        ),
        _g("gpu_violation_current_accumulated_counter", GPU_LABELS, "1", "Throttle residency accumulation counter"),
        _g("gpu_violation_processor_hot_residency_accumulated", GPU_LABELS, "1", "PROCHOT residency, accumulated"),
        _g("gpu_violation_ppt_residency_accumulated", GPU_LABELS, "1", "Package power (PPT) residency, accumulated"),
        _g("gpu_violation_socket_thermal_residency_accumulated", GPU_LABELS, "1", "Socket thermal residency"),
        _g("gpu_violation_vr_thermal_residency_accumulated", GPU_LABELS, "1", "Voltage-rail thermal residency"),
        _g("gpu_violation_hbm_thermal_residency_accumulated", GPU_LABELS, "1", "HBM thermal residency, accumulated"),
        _g("amdtop_gpu_throttle_active", (*GPU_LABELS, "reason"), "1", "1 while the reason limits clocks"),
        _g("amdtop_gpu_throttle_ratio", (*GPU_LABELS, "reason"), "ratio", "Share of the last window spent throttled"),
        _g("gpu_ecc_correct_total", GPU_LABELS, "1", "Correctable ECC errors, all blocks"),
        _g("gpu_ecc_uncorrect_total", GPU_LABELS, "1", "Uncorrectable ECC errors, all blocks"),
        _g("amdtop_gpu_ecc_errors", (*GPU_LABELS, "block", "type"), "1", "ECC/RAS errors per block and type"),
        _g("amdtop_snapshot_timestamp_seconds", ("hostname",), "s", "When the published snapshot was taken"),
        FamilySpec(
            "amdtop_exporter_polls", "counter", ("hostname",), "1", "Node polls (one per interval, whoever scrapes)"
        ),
        _g("amdtop_exporter_poll_duration_seconds", ("hostname",), "s", "Duration of the last poll"),
        _g("amdtop_frame_timestamp_seconds", ("hostname",), "s", "When the frame this scrape serves was made"),
        FamilySpec("amdtop_polls", "counter", ("hostname",), "1", "Backend polls (pipeline ticks) so far"),
        _g(
            "amdtop_gpu_process_memory_bytes",
            ("gpu_id", "hostname", "pid", "owner"),
            "bytes",
            "GPU memory a process holds (the 32 biggest holders; owner: worker, vllm-<pid> or foreign)",
        ),
        _g(
            "amdtop_audit_findings",
            ("hostname", "severity", "id", "worker"),
            "1",
            "Tuning audit findings (amdtop audit)",
        ),
    )
}

# Flags published as a 0/1 gauge per worker.
_WORKER_FLAGS = {
    FlagKind.TP_IMBALANCE: "amdtop_tp_imbalance",
    FlagKind.NUMA_MISMATCH: "amdtop_numa_mismatch",
    FlagKind.TRANSPORT_FALLBACK: "amdtop_transport_fallback",
}


@dataclass(frozen=True, slots=True)
class PollStats:
    """The exporter's own bookkeeping, published with the state."""

    polls: int
    """Polls made so far."""
    last_duration_s: float
    """Duration of the last poll."""


class _Builder:
    """Collects samples per family; only families with at least one sample are emitted."""

    def __init__(self) -> None:
        self._samples: dict[str, list[tuple[tuple[str, ...], float]]] = {}

    def add(self, name: str, labels: tuple[str, ...], value: float | None) -> None:
        if value is None:
            return
        assert len(labels) == len(FAMILIES[name].labels), name
        self._samples.setdefault(name, []).append((labels, float(value)))

    def families(self) -> Iterator[Metric]:
        # Imported at use: the dashboard (the attached viewer above all) imports the exporter for its ``x`` toggle
        # but rarely serves; prometheus_client costs ~3 MiB RSS.
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        for name, samples in self._samples.items():
            spec = FAMILIES[name]
            text = f"{spec.help} ({spec.unit})"
            fam: GaugeMetricFamily | CounterMetricFamily
            if spec.kind == "counter":
                fam = CounterMetricFamily(name, text, labels=spec.labels)
            else:
                fam = GaugeMetricFamily(name, text, labels=spec.labels)
            for labels, value in samples:
                fam.add_metric(list(labels), value)
            yield fam


def _mb(value: int | None) -> float | None:
    return None if value is None else value / MB


def _gpu(b: _Builder, info: GpuInfo, s: GpuSample | None, host: str) -> None:
    base = (str(info.index), host, info.name, info.uuid or "")
    numa = "" if info.numa_node is None else str(info.numa_node)
    b.add("amdtop_gpu_info", (*base, info.bdf, numa, info.vendor), 1)
    b.add("amdtop_gpu_power_cap_watts", base, info.power_cap_w)
    _partitions(b, info, base)
    lost = s is None or s.lost
    b.add("amdtop_gpu_lost", base, 1 if lost else 0)
    if s is None or lost:
        return
    b.add("gpu_gfx_activity", base, s.util_pct)
    b.add("gpu_umc_activity", base, s.mem_util_pct)
    total = s.vram_total_bytes if s.vram_total_bytes is not None else info.vram_total_bytes
    b.add("gpu_used_vram", base, _mb(s.vram_used_bytes))
    b.add("gpu_total_vram", base, _mb(total))
    if s.vram_used_bytes is not None and total is not None:
        b.add("gpu_free_vram", base, _mb(max(0, total - s.vram_used_bytes)))
    b.add("gpu_package_power", base, s.power_w)
    b.add("gpu_junction_temperature", base, s.temp_c)
    b.add("gpu_memory_temperature", base, s.mem_temp_c)
    b.add("gpu_clock", (*base, "GPU_CLOCK_TYPE_SYSTEM"), s.sclk_mhz)
    b.add("gpu_clock", (*base, "GPU_CLOCK_TYPE_MEMORY"), s.mclk_mhz)


# amdtop reason -> device-metrics-exporter residency family (AMD sources only: NVML counts seconds, not ticks).
_RESIDENCY = {
    "prochot": "gpu_violation_processor_hot_residency_accumulated",
    "power_cap": "gpu_violation_ppt_residency_accumulated",
    "socket_thermal": "gpu_violation_socket_thermal_residency_accumulated",
    "vr_thermal": "gpu_violation_vr_thermal_residency_accumulated",
    "hbm_thermal": "gpu_violation_hbm_thermal_residency_accumulated",
}


def _partitions(b: _Builder, info: GpuInfo, base: tuple[str, ...]) -> None:
    def opt(v: int | None) -> str:
        return "" if v is None else str(v)

    if info.compute_partition is not None or info.memory_partition is not None:
        modes = (info.compute_partition or "", info.memory_partition or "")
        b.add("amdtop_gpu_partition_mode_info", (*base, *modes), 1)
    for p in info.partitions:
        labels = (str(p.index), opt(p.hip_index), opt(p.kfd_node), opt(p.render_minor), opt(p.numa_node))
        b.add("amdtop_gpu_partition_info", (*base, *labels), 1)


def _health(b: _Builder, base: tuple[str, ...], s: GpuSample, snap: NodeSnapshot) -> None:
    for c in s.xgmi_links or ():
        labels = (*base, str(c.link), c.peer_bdf or "")
        b.add("gpu_xgmi_link_rx", labels, c.read_kb)
        b.add("gpu_xgmi_link_tx", labels, c.write_kb)
    for reason in s.throttle_active or ():
        b.add("amdtop_gpu_throttle_active", (*base, reason), 1)
    if snap.backend != "nvml" and s.throttle_acc is not None:
        b.add("gpu_violation_current_accumulated_counter", base, s.throttle_clock)
        for reason, value in s.throttle_acc:
            if reason in _RESIDENCY:
                b.add(_RESIDENCY[reason], base, value)
    if s.ecc is not None:
        ce = [e.correctable for e in s.ecc if e.correctable is not None]
        ue = [e.uncorrectable for e in s.ecc if e.uncorrectable is not None]
        b.add("gpu_ecc_correct_total", base, sum(ce) if ce else None)
        b.add("gpu_ecc_uncorrect_total", base, sum(ue) if ue else None)
        for e in s.ecc:
            b.add("amdtop_gpu_ecc_errors", (*base, e.block, "correctable"), e.correctable)
            b.add("amdtop_gpu_ecc_errors", (*base, e.block, "uncorrectable"), e.uncorrectable)
            b.add("amdtop_gpu_ecc_errors", (*base, e.block, "deferred"), e.deferred)


def _worker(b: _Builder, w: WorkerStatus, group: TpGroup | None, host: str) -> None:
    key = (host, w.name)
    for st in WorkerState:
        b.add("amdtop_worker_state", (*key, st.value), 1 if w.state is st else 0)
    b.add("amdtop_worker_ready", key, 1 if w.state is WorkerState.READY else 0)
    b.add("amdtop_worker_restarts", key, w.restarts)
    numa = "" if w.numa_node is None else str(w.numa_node)
    port = "" if w.port is None else str(w.port)
    b.add("amdtop_worker_info", (*key, w.source, ",".join(map(str, w.gpus)), numa, port), 1)
    if group is not None and len(group.gpus) > 1:
        # The windowed spread the tp_imbalance flag was judged on: the same number the TUI shows.
        b.add("amdtop_tp_spread_percent", (*key, "util_pct"), group.util_spread_pct)
        b.add("amdtop_tp_spread_percent", (*key, "vram_used_bytes"), group.vram_spread_pct)


def _worst_group(state: NodeFrame, worker: str) -> TpGroup | None:
    # A data-parallel worker has one TP group per replica: its series carries the most uneven one (what an alert on
    # the worker should see); a plain worker has one group.
    groups = state.groups_of(worker)
    return max(groups, key=lambda g: g.util_spread_pct or 0.0, default=None)


def build_families(state: NodeFrame, stats: PollStats | None = None) -> list[Metric]:
    """Turn one frame into metric families (only those with samples)."""
    b = _Builder()
    snap = state.snapshot
    host = snap.hostname
    bases = {}
    for info in snap.topology.gpus:
        sample = snap.sample(info.index)
        _gpu(b, info, sample, host)
        bases[info.index] = (str(info.index), host, info.name, info.uuid or "")
        if sample is not None and not sample.lost:
            _health(b, bases[info.index], sample, snap)
    for share in state.throttle:
        if share.gpu in bases:
            for reason, value in share.shares:
                b.add("amdtop_gpu_throttle_ratio", (*bases[share.gpu], reason), value)
    for p in state.fabric.pairs if state.fabric is not None else ():
        pair = (host, str(p.src), str(p.peer))
        b.add("amdtop_fabric_traffic_bytes_per_second", (*pair, "read"), p.read_bps)
        b.add("amdtop_fabric_traffic_bytes_per_second", (*pair, "write"), p.write_bps)
    for link in snap.topology.links:
        pair = (host, str(link.a), str(link.b))
        hops = "" if link.hops is None else str(link.hops)
        weight = "" if link.weight is None else str(link.weight)
        b.add("amdtop_link_info", (*pair, link.type.value, hops, weight), 1)
        mbs = link.max_bandwidth_mbs
        b.add("amdtop_link_max_bandwidth_bytes_per_second", pair, None if mbs is None else mbs * 1e6)
    for bw in state.bandwidth:
        lo, hi = sorted((bw.a, bw.b))
        b.add("amdtop_link_measured_bandwidth_bytes_per_second", (host, str(lo), str(hi)), bw.gbps * 1e9)
    for w in state.workers:
        _worker(b, w, _worst_group(state, w.name), host)
    flags = state.flags
    by_kind: dict[str, int] = {}
    for flag in flags:
        by_kind[flag.kind.value] = by_kind.get(flag.kind.value, 0) + 1
    for kind in FlagKind:
        b.add("amdtop_flags", (host, kind.value), by_kind.get(kind.value, 0))
    for kind, name in _WORKER_FLAGS.items():
        flagged = {f.worker or "" for f in flags if f.kind is kind}
        for worker in sorted(flagged | {w.name for w in state.workers}):
            b.add(name, (host, worker), 1 if worker in flagged else 0)
    active = {(host, f.kind.value, f.worker or "", ",".join(map(str, f.gpus)), _rank_label(f)) for f in flags}
    for labels in sorted(active):
        b.add("amdtop_flag_active", labels, 1)
    incidents: dict[tuple[str, str, str], int] = {(host, kind, "0"): 0 for kind in INCIDENT_KINDS}
    for inc in state.incidents:
        labels3 = (host, inc.kind, "1" if inc.historic else "0")
        incidents[labels3] = incidents.get(labels3, 0) + 1
    for incident_labels, n in sorted(incidents.items()):
        b.add("amdtop_incidents", incident_labels, n)
    for r in state.log_counts:
        b.add("amdtop_rccl_errors", (host, r.worker), r.errors)
        b.add("amdtop_rccl_warnings", (host, r.worker), r.warnings)
    for k in state.ramp_knees:
        b.add("amdtop_ramp_knee_concurrency", (host, k.worker), k.concurrency)
        b.add("amdtop_ramp_recommended_max_num_seqs", (host, k.worker), k.recommended_max_num_seqs)
        b.add("amdtop_ramp_timestamp_seconds", (host, k.worker), k.timestamp)
    b.add("amdtop_snapshot_timestamp_seconds", (host,), snap.timestamp)
    b.add("amdtop_frame_timestamp_seconds", (host,), state.made_at)
    if state.tick:
        b.add("amdtop_polls", (host,), state.tick)
    for gpu, pid, owner, held in memory_series(state.processes):
        b.add("amdtop_gpu_process_memory_bytes", (str(gpu), host, str(pid), owner), held)
    if state.audit is not None:
        counts: dict[tuple[str, str, str, str], int] = {}
        for f in state.audit.findings:
            key = (host, f.severity, f.id, f.worker or "")
            counts[key] = counts.get(key, 0) + 1
        for finding_labels, n in sorted(counts.items()):
            b.add("amdtop_audit_findings", finding_labels, n)
    if stats is not None:
        b.add("amdtop_exporter_polls", (host,), stats.polls)
        b.add("amdtop_exporter_poll_duration_seconds", (host,), stats.last_duration_s)
    return list(b.families())


def _rank_label(flag: Flag) -> str:
    """The ``rank`` label of ``amdtop_flag_active``: the rank a flag names (``worker_stalled``), else empty."""
    rank = dict(flag.extra).get("rank")
    return "" if rank is None else str(rank)
