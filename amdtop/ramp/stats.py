"""Per-request results and per-step metrics with `vllm bench serve`'s definitions (see vllm.md section 9).

TTFT is the first content chunk minus the send time, ITL the gaps between content chunks, E2EL the last content chunk
minus the send time, TPOT ``(E2EL - TTFT) / (output_tokens - 1)`` for outputs longer than one token; output tokens
come from the usage chunk. Percentiles interpolate linearly between order statistics, as ``np.percentile`` does.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

PERCENTILES = (50, 90, 99)
METRICS = ("ttft", "tpot", "itl", "e2el")


@dataclass(frozen=True, slots=True)
class RequestResult:
    """One request as the client saw it (times in seconds on the monotonic clock)."""

    start: float
    """When the request was sent."""
    end: float
    """When the response ended (last byte, error or timeout)."""
    ok: bool
    ttft: float | None = None
    itl: tuple[float, ...] = ()
    e2el: float | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    error: str | None = None
    """Failure reason: ``http_<status>``, ``stream_error``, ``timeout``, ``connect`` or ``protocol``."""
    detail: str = ""

    def chunk_times(self) -> list[float]:
        """Arrival times of the content chunks (monotonic seconds)."""
        if self.ttft is None:
            return []
        t = self.start + self.ttft
        out = [t]
        for gap in self.itl:
            t += gap
            out.append(t)
        return out

    @property
    def tpot(self) -> float | None:
        """Time per output token excluding the first, ``None`` for one-token outputs."""
        if not self.ok or self.ttft is None or self.e2el is None or self.output_tokens <= 1:
            return None
        return (self.e2el - self.ttft) / (self.output_tokens - 1)


def percentile(values: Sequence[float], q: float) -> float:
    """``np.percentile(values, q)`` with the default linear method; NaN for no values."""
    if not values:
        return math.nan
    s = sorted(values)
    pos = (len(s) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def _std(values: Sequence[float]) -> float:
    # np.std default: population standard deviation (ddof=0).
    if not values:
        return math.nan
    m = sum(values) / len(values)
    return math.sqrt(sum((v - m) ** 2 for v in values) / len(values))


def _summ(name: str, values_s: Sequence[float]) -> dict[str, float | None]:
    ms = [v * 1000.0 for v in values_s]
    out: dict[str, float | None] = {
        f"mean_{name}_ms": (sum(ms) / len(ms)) if ms else None,
        f"median_{name}_ms": percentile(ms, 50) if ms else None,
        f"std_{name}_ms": _std(ms) if ms else None,
    }
    for p in PERCENTILES:
        out[f"p{p}_{name}_ms"] = percentile(ms, p) if ms else None
    return out


@dataclass(frozen=True, slots=True)
class StepResult:
    """One concurrency step: the measured window's requests and the generator's own cost."""

    concurrency: int
    duration: float
    """Length of the measurement window, seconds."""
    results: tuple[RequestResult, ...]
    """Requests that ended inside the window (completed or failed)."""
    client_cpu_s: float = 0.0
    """CPU time the generator's thread used during the step (warm-up, window and drain)."""
    wall_s: float = 0.0
    """Wall time of the whole step (warm-up, window and drain)."""
    all_output_tokens: int = 0
    """Output tokens of every request of the step incl. warm-up and drain (matches server counter deltas)."""
    all_requests: int = 0
    refined: bool = False
    window_tokens: tuple[float, float] | None = None
    """(input, output) tokens streamed inside the window, see :func:`window_tokens`; ``None`` = count whole requests."""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def completed(self) -> int:
        """Successful requests in the window."""
        return sum(1 for r in self.results if r.ok)

    @property
    def failed(self) -> int:
        """Failed requests in the window."""
        return sum(1 for r in self.results if not r.ok)

    @property
    def error_rate(self) -> float:
        """Failed / ended requests in the window."""
        n = len(self.results)
        return self.failed / n if n else 0.0

    def _tokens(self) -> tuple[float, float]:
        if self.window_tokens is not None:
            return self.window_tokens
        ok = [r for r in self.results if r.ok]
        return float(sum(r.input_tokens for r in ok)), float(sum(r.output_tokens for r in ok))

    @property
    def output_throughput(self) -> float:
        """Output tokens per second of the window."""
        return self._tokens()[1] / self.duration if self.duration > 0 else 0.0

    def to_json(self) -> dict[str, Any]:
        """The step as a dict with `vllm bench serve` result keys plus amdtop's own."""
        ok = [r for r in self.results if r.ok]
        dur = self.duration
        tin = sum(r.input_tokens for r in ok)
        tout = sum(r.output_tokens for r in ok)
        win_in, win_out = self._tokens()
        doc: dict[str, Any] = {
            "concurrency": self.concurrency,
            "max_concurrency": self.concurrency,
            "completed": len(ok),
            "failed": self.failed,
            "duration": dur,
            "total_input_tokens": tin,
            "total_output_tokens": tout,
            "request_throughput": len(ok) / dur if dur > 0 else 0.0,
            "output_throughput": win_out / dur if dur > 0 else 0.0,
            "total_token_throughput": (win_in + win_out) / dur if dur > 0 else 0.0,
        }
        doc.update(_summ("ttft", [r.ttft for r in ok if r.ttft is not None]))
        doc.update(_summ("tpot", [t for r in ok if (t := r.tpot) is not None]))
        doc.update(_summ("itl", [g for r in ok for g in r.itl]))
        doc.update(_summ("e2el", [r.e2el for r in ok if r.e2el is not None]))
        doc["errors"] = dict(Counter(r.error or "unknown" for r in self.results if not r.ok))
        doc["error_rate"] = self.error_rate
        doc["client_cpu_s"] = self.client_cpu_s
        doc["client_cpu_pct"] = 100.0 * self.client_cpu_s / self.wall_s if self.wall_s > 0 else 0.0
        doc["wall_s"] = self.wall_s
        doc["all_requests"] = self.all_requests
        doc["all_output_tokens"] = self.all_output_tokens
        doc["refined"] = self.refined
        doc.update(self.extra)
        return {k: _clean(v) for k, v in doc.items()}


def window_tokens(results: Sequence[RequestResult], start: float, end: float) -> tuple[float, float]:
    """Input and output tokens that streamed inside ``[start, end]``, from usage counts spread over the chunks.

    Counting only whole requests that end inside a fixed window quantises throughput by up to one request per slot
    (worse when a batched server finishes its slots together); crediting each completed request's usage tokens in
    proportion to its content chunks inside the window removes that edge error. A prompt counts where its first
    chunk arrives.
    """
    tin = tout = 0.0
    for r in results:
        if not r.ok:
            continue
        times = r.chunk_times()
        if not times:
            continue
        inside = sum(1 for t in times if start <= t <= end)
        tout += r.output_tokens * inside / len(times)
        if start <= times[0] <= end:
            tin += r.input_tokens
    return tin, tout


def _clean(v: Any) -> Any:
    # JSON has no NaN: a metric without samples is null.
    if isinstance(v, float) and math.isnan(v):
        return None
    return v
