"""JSON of a worker's layout and engines (``workers[].layout``/``engines`` in ``snapshot``/``workers status``)."""

from __future__ import annotations

from typing import Any

from amdtop.model import WorkerStatus


def layout_json(w: WorkerStatus) -> dict[str, Any]:
    """``{"dp", "tp", "pp", "expert_parallel", "api_servers", "tp_groups": [{"dp_rank", "gpus"}]}``."""
    groups = w.tp_groups()
    lay = w.layout
    return {
        "dp": lay.dp if lay else 1,
        "tp": lay.tp if lay else max(1, len(w.gpus)),
        "pp": lay.pp if lay else 1,
        "expert_parallel": lay.expert_parallel if lay else False,
        "api_servers": lay.api_servers if lay else None,
        "tp_groups": [{"dp_rank": g.dp_rank, "pp_rank": g.pp_rank, "gpus": list(g.gpus)} for g in groups],
    }


def engines_json(w: WorkerStatus) -> list[dict[str, Any]]:
    """One entry per engine (DP replica): requests, KV usage 0..1, generation tokens/s, sleep level."""
    if w.engine is None:
        return []
    return [
        {
            "engine": e.engine,
            "running": e.running,
            "waiting": e.waiting,
            "kv_cache_usage": e.kv_cache_usage,
            "gen_tokens_per_s": e.gen_tokens_per_s,
            "sleep_level": e.sleep_level,
        }
        for e in w.engine.engines
    ]


def engine_json(w: WorkerStatus) -> dict[str, Any] | None:
    """The worker's engine numbers (``workers[].engine``), ``None`` where its ``/metrics`` was not read."""
    e = w.engine
    if e is None:
        return None
    return {
        "running": e.running,
        "waiting": e.waiting,
        "kv_cache_usage": e.kv_cache_usage,
        "gen_tokens_per_s": e.gen_tokens_per_s,
        "cache_hit_rate": e.cache_hit_rate,
        "ttft_mean_s": e.ttft_mean_s,
        "itl_mean_s": e.itl_mean_s,
    }


def worker_extra_json(w: WorkerStatus) -> dict[str, Any]:
    """The keys this round adds to a worker's JSON: ``layout``, ``engines``, ``sleep_level``, ``engine_kind``;
    ``engine`` and ``log_note`` (a found server's, the same keys as an own worker's)."""
    return {
        "engine": engine_json(w),
        "log_note": w.log_note,
        "engine_kind": w.engine_kind,
        "layout": layout_json(w),
        "engines": engines_json(w),
        "sleep_level": None if w.engine is None else w.engine.sleep_level,
    }
