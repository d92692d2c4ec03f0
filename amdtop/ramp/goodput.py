"""Goodput under user SLOs, exactly as ``vllm bench serve --goodput ttft:MS tpot:MS e2el:MS`` defines it.

vLLM (``vllm/benchmarks/serve.py``, ``calculate_metrics``): a completed request is good when, for every SLO given,
``slo >= value`` (TTFT, TPOT or E2EL of that request, seconds); a request with one output token or fewer has TPOT 0
for this check; goodput = good requests / benchmark duration. Names other than ttft, tpot, e2el and negative values
are refused, as ``check_goodput_args`` does.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from amdtop.errors import InputError
from amdtop.ramp.stats import RequestResult

GOODPUT_NAMES = ("ttft", "tpot", "e2el")


def parse_goodput(pairs: Sequence[str]) -> tuple[tuple[str, float], ...]:
    """``["ttft:500", "tpot:50"]`` -> ``(("ttft", 500.0), ("tpot", 50.0))``; InputError naming ``--goodput``."""
    out: dict[str, float] = {}
    for pair in pairs:
        for item in pair.replace(",", " ").split():
            name, sep, value = item.partition(":")
            try:
                if not sep:
                    raise ValueError
                ms = float(value)
            except ValueError:
                raise InputError(
                    f"--goodput: {item!r} is not KEY:VALUE; give SLOs in milliseconds, e.g. --goodput ttft:500 tpot:50"
                ) from None
            if name not in GOODPUT_NAMES:
                raise InputError(f"--goodput: unknown SLO {name!r}; use ttft, tpot or e2el (milliseconds)")
            if not math.isfinite(ms):
                raise InputError(
                    f"--goodput: {name}:{value} is not a finite number; give milliseconds, e.g. {name}:500"
                )
            if ms < 0:
                raise InputError(f"--goodput: {name}:{value} is negative; SLOs are non-negative milliseconds")
            out[name] = ms
    return tuple(out.items())


def is_good(r: RequestResult, slos: Sequence[tuple[str, float]]) -> bool:
    """Whether the completed request ``r`` meets every SLO (vLLM's ``all(s >= r ...)``)."""
    if not r.ok or r.ttft is None or r.e2el is None:
        return False
    tpot = r.tpot if r.tpot is not None else 0.0
    values = {"ttft": r.ttft, "tpot": tpot, "e2el": r.e2el}
    return all(ms / 1000.0 >= values[name] for name, ms in slos)


def goodput_keys(
    results: Sequence[RequestResult], duration_s: float, slos: Sequence[tuple[str, float]]
) -> dict[str, Any]:
    """``request_goodput`` (req/s, vLLM's key) and ``good_completed`` for a step; empty without SLOs."""
    if not slos:
        return {}
    good = sum(1 for r in results if is_good(r, slos))
    return {"good_completed": good, "request_goodput": good / duration_s if duration_s > 0 else 0.0}


def describe(slos: Sequence[tuple[str, float]]) -> str:
    """``ttft:500 tpot:50`` as given on the command line."""
    return " ".join(f"{name}:{ms:g}" for name, ms in slos)
