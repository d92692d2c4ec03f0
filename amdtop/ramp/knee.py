"""Knee detection and the refinement points between the knee and the step before it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Knee:
    """The recommended concurrency and why."""

    concurrency: int
    reason: str
    cause: str = "unknown"
    """Why throughput stops growing here (:data:`amdtop.ramp.cause.CAUSES`)."""
    evidence: tuple[str, ...] = ()
    """The numbers behind ``cause``, one line each."""

    def to_json(self) -> dict[str, Any]:
        """``{"concurrency", "reason", "cause", "evidence"}`` as in the contract."""
        return {"concurrency": self.concurrency, "reason": self.reason, "cause": self.cause,
                "evidence": list(self.evidence)}  # fmt: skip


def default_concurrencies(max_num_seqs: int) -> list[int]:
    """1, 2, 4, ... up to and including ``max_num_seqs``."""
    out, c = [], 1
    while c < max_num_seqs:
        out.append(c)
        c *= 2
    out.append(max_num_seqs)
    return out


def find_knee(
    steps: Sequence[dict[str, Any]],
    *,
    fraction: float = 0.9,
    slo_ttft_ms: float | None = None,
    slo_tpot_ms: float | None = None,
) -> Knee | None:
    """The smallest concurrency whose output throughput is within ``fraction`` of the best, capped by the SLO.

    ``steps`` are step dicts (``concurrency``, ``output_throughput``, ``p99_ttft_ms``, ``p99_tpot_ms``, ``completed``).
    With an SLO the knee is never above the step before the first one whose p99 TTFT or TPOT breaks it.
    """
    usable = sorted((s for s in steps if s.get("completed", 0) > 0), key=lambda s: s["concurrency"])
    if not usable:
        return None
    best = max(usable, key=lambda s: s["output_throughput"])
    best_thr = best["output_throughput"]
    knee = next(s for s in usable if s["output_throughput"] >= fraction * best_thr)
    reason = (
        f"output throughput {knee['output_throughput']:.1f} tok/s is within {100 * fraction:.0f}% of the best "
        f"{best_thr:.1f} tok/s (at concurrency {best['concurrency']})"
    )
    for i, s in enumerate(usable):
        broken = _slo_break(s, slo_ttft_ms, slo_tpot_ms)
        if broken is None:
            continue
        if s["concurrency"] > knee["concurrency"]:
            break
        if i == 0:
            return Knee(s["concurrency"], f"{broken} already at the lowest concurrency {s['concurrency']}")
        prev = usable[i - 1]
        return Knee(prev["concurrency"], f"{broken} at concurrency {s['concurrency']}; the step before meets it")
    return Knee(knee["concurrency"], reason)


def _slo_break(step: dict[str, Any], ttft: float | None, tpot: float | None) -> str | None:
    for key, label, limit in (("p99_ttft_ms", "p99 TTFT", ttft), ("p99_tpot_ms", "p99 TPOT", tpot)):
        value = step.get(key)
        if limit is not None and value is not None and value > limit:
            return f"{label} {value:.1f} ms breaks the SLO of {limit:g} ms"
    return None


def refinement_points(done: Sequence[int], knee: int, max_points: int = 3) -> list[int]:
    """Up to ``max_points`` untested concurrencies strictly between the step before the knee and the knee."""
    below = [c for c in done if c < knee]
    if not below:
        return []
    lo = max(below)
    gap = [c for c in range(lo + 1, knee) if c not in done]
    if len(gap) <= max_points:
        return gap
    # Evenly spaced inside the gap, so a wide gap (64 -> 128) is still probed across its whole span.
    step = (knee - lo) / (max_points + 1)
    return sorted({round(lo + step * (k + 1)) for k in range(max_points)} - set(done))
