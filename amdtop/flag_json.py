"""One flag as JSON (``flags[]`` of ``snapshot --json``, ``logs parse --json`` and the probe cache): its own module,
so the probe's results read it without the whole report (and the pipeline, which reads the probe cache, below it)."""

from __future__ import annotations

from typing import Any

from amdtop.model import Flag


def flag_json(flag: Flag) -> dict[str, Any]:
    """One flag as a ``flags[]`` entry."""
    out: dict[str, Any] = {"kind": flag.kind.value, "message": flag.message}
    if flag.worker is not None:
        out["worker"] = flag.worker
    if flag.gpus:
        out["gpus"] = list(flag.gpus)
    if flag.metric is not None:
        out["metric"] = flag.metric
    if flag.spread_pct is not None:
        out["spread_pct"] = round(flag.spread_pct, 2)
    for key, value in flag.extra:
        out[key] = value
    return out
