"""Snapshots to the JSON documents of the CLI contract."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from amdtop.cpulist import format_cpulist
from amdtop.engines_json import worker_extra_json
from amdtop.flag_json import flag_json
from amdtop.gpuprocs.report import add_processes
from amdtop.health.report import fabric_json, gpu_health_json
from amdtop.health.stall import health_json
from amdtop.hip_devices import partition_keys
from amdtop.logread.incidents.model import incident_json
from amdtop.logread.rccl.views import worker_logs_json
from amdtop.model import Flag, NodeSnapshot, Topology, WorkerStatus

if TYPE_CHECKING:
    from amdtop.pipeline.frame import NodeFrame, TpGroup


def topology_json(topology: Topology) -> dict[str, Any]:
    """The ``links`` and ``numa_nodes`` keys shared by ``snapshot`` and ``topo``."""
    return {
        "links": [
            {
                "a": link.a,
                "b": link.b,
                "type": link.type.value,
                "hops": link.hops,
                "weight": link.weight,
                "nvlinks": link.nvlinks,
                "max_bandwidth_mbs": link.max_bandwidth_mbs,
            }
            for link in topology.links
        ],
        "numa_nodes": [
            {
                "id": node.id,
                "cpus": list(node.cpus),
                "cpulist": format_cpulist(node.cpus),
                "mem_total_bytes": node.mem_total_bytes,
            }
            for node in topology.numa_nodes
        ],
    }


def snapshot_json(
    snap: NodeSnapshot,
    workers: Sequence[Mapping[str, Any]] = (),
    flags: Iterable[Flag] = (),
    *,
    with_metrics: bool = True,
) -> dict[str, Any]:
    """The ``snapshot --json`` document (``topo --json`` when ``with_metrics`` is false)."""
    gpus: list[dict[str, Any]] = []
    for info in snap.topology.gpus:
        gpu: dict[str, Any] = {
            "index": info.index,
            "name": info.name,
            "bdf": info.bdf,
            "numa_node": info.numa_node,
            "vendor": info.vendor,
            "uuid": info.uuid,
            "cpu_affinity": format_cpulist(info.cpu_affinity),
        }
        gpu.update(partition_keys(info))
        sample = snap.sample(info.index)
        if with_metrics:
            lost = sample is None or sample.lost
            gpu.update(
                {
                    "util_pct": None if sample is None else sample.util_pct,
                    "vram_used_bytes": None if sample is None else sample.vram_used_bytes,
                    "vram_total_bytes": info.vram_total_bytes if sample is None else sample.vram_total_bytes,
                    "power_w": None if sample is None else sample.power_w,
                    "temp_c": None if sample is None else sample.temp_c,
                    "mem_temp_c": None if sample is None else sample.mem_temp_c,
                    "sclk_mhz": None if sample is None else sample.sclk_mhz,
                    "mclk_mhz": None if sample is None else sample.mclk_mhz,
                    "mem_util_pct": None if sample is None else sample.mem_util_pct,
                    "power_cap_w": info.power_cap_w,
                    "lost": lost,
                    "processes": []
                    if sample is None
                    else [
                        {"pid": p.pid, "name": p.name, "vram_bytes": p.vram_bytes, "partition": p.partition}
                        for p in sample.processes
                    ],
                }
            )
        gpus.append(gpu)
    all_flags = list(snap.flags) + [f for f in flags if f not in snap.flags]
    doc: dict[str, Any] = {
        "backend": snap.backend,
        "hostname": snap.hostname,
        "timestamp": snap.timestamp,
        "gpus": gpus,
    }
    doc.update(topology_json(snap.topology))
    doc["workers"] = [dict(w) for w in workers]
    doc["flags"] = [flag_json(f) for f in all_flags]
    return doc


def worker_json(w: WorkerStatus) -> dict[str, Any]:
    """One worker as a ``workers[]`` entry of ``snapshot --json``."""
    return {
        "name": w.name,
        "state": w.state.value,
        "pid": w.pid,
        "pgid": w.pgid,
        "gpus": list(w.gpus),
        "numa_node": w.numa_node,
        "port": w.port,
        "url": w.url,
        "cpu_affinity": list(w.cpu_affinity),
        "mems_allowed": list(w.mems_allowed),
        "log": w.log,
        "restarts": w.restarts,
        "source": w.source,
        "rank_pids": [{"rank": r, "pid": p} for r, p in w.rank_pids],
        **worker_extra_json(w),
        "health": health_json(w.health),
    }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


def group_json(g: TpGroup) -> dict[str, Any]:
    """One TP group as a ``tp_groups[]`` entry: the windowed spreads the flags were judged on."""
    return {
        "worker": g.worker,
        "gpus": list(g.gpus),
        "util_spread_pct": _round(g.util_spread_pct),
        "vram_spread_pct": _round(g.vram_spread_pct),
        "util_mean_pct": _round(g.util_mean_pct),
        "window_s": g.window_s,
        "samples": g.samples,
        "imbalanced": g.imbalanced,
        "lost_gpus": list(g.lost_gpus),
        "dp_rank": g.dp_rank,
    }


def frame_json(frame: NodeFrame) -> dict[str, Any]:
    """The ``snapshot --json`` document of one pipeline frame."""
    doc = snapshot_json(frame.snapshot, [worker_json(w) for w in frame.workers], frame.flags)
    for gpu in doc["gpus"]:
        sample = frame.snapshot.sample(gpu["index"])
        if sample is not None and not sample.lost:
            gpu.update(gpu_health_json(sample, frame.throttle_of(gpu["index"])))
    doc["fabric"] = fabric_json(frame.fabric)
    doc["tp_groups"] = [group_json(g) for g in frame.groups]
    doc["log_counts"] = [{"worker": c.worker, "errors": c.errors, "warnings": c.warnings} for c in frame.log_counts]
    doc["logs"] = [] if frame.logs is None else [worker_logs_json(w) for w in frame.logs.workers]
    k = frame.kernel_log
    doc["kernel_log"] = (
        None if k is None else {"source": k.source, "available": k.available, "note": k.note, "lines": k.lines}
    )
    doc["incidents"] = [incident_json(i) for i in frame.incidents]
    doc["missing_gpus"] = [] if k is None else [m.json() for m in k.missing_gpus]
    if frame.errors:
        doc["errors"] = list(frame.errors)
    add_processes(doc, frame.processes, frame.process_totals)
    doc["audit"] = None if frame.audit is None else frame.audit.to_json()
    if frame.audit is not None:
        for w in doc["workers"]:
            if w.get("name") in {n for n, _ in frame.audit.locality}:
                w["numa_locality"] = {"local_pct": frame.audit.locality_of(w["name"])}
    return doc
