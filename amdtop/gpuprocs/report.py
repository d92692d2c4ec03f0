"""The process rows as ``gpus[].processes[]`` of ``snapshot --json``, and the exporter's bounded selection."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from amdtop.gpuprocs.rows import GpuProcessTotal, ProcessRow

EXPORT_TOP = 32
"""The exporter's per-process series: the biggest holders of GPU memory only, so a node's series stay bounded."""


def process_json(row: ProcessRow) -> dict[str, Any]:
    """One process: the backend's keys (``pid``, ``name``, ``vram_bytes``, ``partition``) and the host's."""
    return {
        "pid": row.pid,
        "name": row.name,
        "vram_bytes": row.vram_bytes,
        "partition": row.partition,
        "gpu_util_pct": row.gpu_util_pct,
        "user": row.user,
        "cpu_pct": row.cpu_pct,
        "rss_bytes": row.rss_bytes,
        "elapsed_s": None if row.elapsed_s is None else round(row.elapsed_s, 1),
        "command": row.command,
        "owner": row.owner,
        "owner_kind": row.owner_kind,
        "rank": row.rank,
    }


def totals_json(total: GpuProcessTotal) -> dict[str, Any]:
    """Memory the processes hold against the memory in use (``processes_vram`` of a GPU)."""
    return {
        "processes": total.processes,
        "held_bytes": total.held_bytes,
        "used_bytes": total.used_bytes,
        "unheld_bytes": total.unheld_bytes,
    }


def add_processes(doc: dict[str, Any], rows: Sequence[ProcessRow], totals: Sequence[GpuProcessTotal]) -> None:
    """Replace each GPU's ``processes`` in a snapshot document with the full rows and add ``processes_vram``."""
    by_gpu: dict[int, list[dict[str, Any]]] = {}
    for row in rows:
        by_gpu.setdefault(row.gpu, []).append(process_json(row))
    total_of = {t.gpu: t for t in totals}
    for gpu in doc["gpus"]:
        index = gpu["index"]
        if index in total_of:
            gpu["processes"] = by_gpu.get(index, [])
            gpu["processes_vram"] = totals_json(total_of[index])


def memory_series(rows: Sequence[ProcessRow], n: int = EXPORT_TOP) -> list[tuple[int, int, str, int]]:
    """(GPU, pid, owner, bytes) of the ``n`` biggest holders of GPU memory; a process on several partitions of one
    GPU is one series (its partitions added up). Ties go by GPU, then pid, so the selection is stable."""
    held: dict[tuple[int, int], tuple[str, int]] = {}
    for r in rows:
        if r.vram_bytes is None:
            continue
        owner, total = held.get((r.gpu, r.pid), (r.owner, 0))
        held[(r.gpu, r.pid)] = (owner, total + r.vram_bytes)
    ranked = sorted(held.items(), key=lambda kv: (-kv[1][1], kv[0]))[:n]
    return [(gpu, pid, owner, total) for (gpu, pid), (owner, total) in ranked]
