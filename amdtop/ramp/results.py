"""The ramp result document (CLI contract shape) and its JSON/CSV files in the state dir."""

from __future__ import annotations

import csv
import io
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from amdtop.private_files import make_private_dirs, write_private
from amdtop.ramp.knee import Knee

CSV_COLUMNS = (
    "concurrency", "completed", "failed", "duration", "request_throughput", "output_throughput",
    "total_token_throughput", "mean_ttft_ms", "median_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "median_tpot_ms",
    "p99_tpot_ms", "mean_itl_ms", "median_itl_ms", "p99_itl_ms", "mean_e2el_ms", "median_e2el_ms", "p99_e2el_ms",
    "error_rate", "client_cpu_pct", "refined",
    # Per-step recording (issue 16): goodput, the worker's /metrics, the TP ranks' GPUs, CPU placement.
    "request_goodput", "good_completed", "kv_cache_usage_max", "kv_cache_usage_mean", "num_preemptions",
    "running_mean", "running_max", "waiting_mean", "waiting_max", "mean_queue_time_ms", "server_prompt_tokens",
    "server_generation_tokens", "kv_cache_tokens", "gpu_util_mean", "gpu_util_spread", "power_frac_max",
    "throttled_frac", "xgmi_gbps", "worker_cpu_pct", "client_shares_cores", "client_shared_cpus",
)  # fmt: skip


@dataclass(slots=True)
class RampResult:
    """A ramp in progress or finished; ``steps`` grow as steps end."""

    url: str
    model: str
    settings: dict[str, Any]
    steps: list[dict[str, Any]] = field(default_factory=list)
    knee: Knee | None = None
    aborted: str | None = None
    """Why the ramp stopped early, ``None`` when it ran to its end."""
    finished: bool = False
    started: float = field(default_factory=time.time)
    worker: str | None = None
    """Supervisor worker the ramp ran against (the exporter labels knees with it)."""
    finished_at: float | None = None
    """When the ramp ended (finished or stopped early), seconds since the epoch."""
    recommendation: dict[str, Any] | None = None
    """What to change for the knee's cause (``amdtop.ramp.cause.Verdict.recommendation``)."""

    def to_json(self) -> dict[str, Any]:
        """The contract document: url, model, steps, knee, recommended_max_num_seqs (plus extras)."""
        return {
            "url": self.url,
            "model": self.model,
            "worker": self.worker,
            "timestamp": self.started,
            "finished_at": self.finished_at,
            "date": time.strftime("%Y%m%d-%H%M%S", time.localtime(self.started)),
            "settings": self.settings,
            "steps": sorted(self.steps, key=lambda s: s["concurrency"]),
            "knee": self.knee.to_json() if self.knee else None,
            "recommended_max_num_seqs": self.knee.concurrency if self.knee else None,
            "recommendation": self.recommendation,
            "aborted": self.aborted,
            "finished": self.finished,
        }


def to_csv(doc: dict[str, Any]) -> str:
    """One row per step."""
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(CSV_COLUMNS)
    for s in doc["steps"]:
        w.writerow(["" if s.get(c) is None else s.get(c) for c in CSV_COLUMNS])
    return buf.getvalue()


def _atomic(path: Path, text: str) -> None:
    write_private(path, text)  # 0600: the document names the server and what it served


def save(result: RampResult, state_dir: Path) -> tuple[Path, Path]:
    """Write ``<state>/ramp/ramp-<date>.json`` and ``.csv`` (atomically, so partial results are always readable)."""
    doc = result.to_json()
    folder = state_dir / "ramp"
    make_private_dirs(folder)
    tag = result.worker or (result.url.rsplit(":", 1)[-1] if ":" in result.url.split("//", 1)[-1] else "")
    tag = "".join(c if c.isalnum() or c in "-_." else "_" for c in tag)
    stem = folder / (f"ramp-{doc['date']}-{tag}" if tag else f"ramp-{doc['date']}")
    jpath, cpath = stem.with_suffix(".json"), stem.with_suffix(".csv")
    _atomic(jpath, json.dumps(doc, indent=2) + "\n")
    _atomic(cpath, to_csv(doc))
    return jpath, cpath
