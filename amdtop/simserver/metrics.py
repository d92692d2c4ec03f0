"""Prometheus text exposition of the simulated server, with vLLM's metric names and labels."""

from __future__ import annotations

import bisect
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from amdtop.simserver.engine import SimEngine


class Histogram:
    """A cumulative Prometheus histogram with fixed bucket bounds (seconds)."""

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.total = 0.0
        self.n = 0

    def observe(self, value: float) -> None:
        """Add one observation."""
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.total += value
        self.n += 1

    def lines(self, name: str, labels: str) -> list[str]:
        """The ``_bucket``/``_sum``/``_count`` lines."""
        out = [f"# HELP {name} Histogram of {name}.", f"# TYPE {name} histogram"]
        acc = 0
        for bound, count in zip(self.bounds, self.counts, strict=False):
            acc += count
            out.append(f'{name}_bucket{{{labels},le="{float(bound)}"}} {float(acc)}')
        out.append(f'{name}_bucket{{{labels},le="+Inf"}} {float(self.n)}')
        out.append(f"{name}_count{{{labels}}} {float(self.n)}")
        out.append(f"{name}_sum{{{labels}}} {self.total}")
        return out


def render(engine: SimEngine, created: float) -> str:
    """The whole ``/metrics`` page."""
    cfg = engine.cfg
    lab = f'engine="0",model_name="{cfg.model}"'
    out: list[str] = []

    def gauge(name: str, value: float, extra: str = "", help_: str = "") -> None:
        out.extend([f"# HELP {name} {help_ or name}", f"# TYPE {name} gauge", f"{name}{{{lab}{extra}}} {float(value)}"])

    def counter(name: str, rows: list[tuple[str, float]]) -> None:
        base = name.removesuffix("_total")
        out.extend([f"# HELP {name} {name}", f"# TYPE {name} counter"])
        out.extend(f"{name}{{{lab}{extra}}} {float(v)}" for extra, v in rows)
        out.extend([f"# HELP {base}_created {name}", f"# TYPE {base}_created gauge"])
        out.extend(f"{base}_created{{{lab}{extra}}} {created}" for extra, _ in rows)

    gauge("vllm:num_requests_running", len(engine.running), help_="Number of requests in model execution batches.")
    gauge("vllm:num_requests_waiting", len(engine.waiting), help_="Number of requests waiting to be processed.")
    out.extend(
        [
            "# HELP vllm:num_requests_waiting_by_reason waiting by reason",
            "# TYPE vllm:num_requests_waiting_by_reason gauge",
        ]
    )
    out.append(f'vllm:num_requests_waiting_by_reason{{{lab},reason="capacity"}} {float(len(engine.waiting))}')
    out.append(f'vllm:num_requests_waiting_by_reason{{{lab},reason="deferred"}} 0.0')
    gauge("vllm:kv_cache_usage_perc", engine.kv_usage(), help_="KV-cache usage. 1 means 100 percent usage.")
    out.extend(
        [
            "# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig",
            "# TYPE vllm:cache_config_info gauge",
        ]
    )
    out.append(
        f'vllm:cache_config_info{{block_size="{cfg.block_size}",enable_prefix_caching="True",'
        f'gpu_memory_utilization="{cfg.gpu_memory_utilization}",kv_cache_size_tokens="{cfg.kv_cache_tokens}",'
        f'num_gpu_blocks="{engine.total_blocks}",{lab}}} 1.0'
    )
    counter("vllm:prompt_tokens_total", [("", engine.prompt_tokens_total)])
    counter("vllm:generation_tokens_total", [("", engine.generation_tokens_total)])
    counter("vllm:num_preemptions_total", [("", engine.preemptions)])
    counter("vllm:request_success_total", [(f',finished_reason="{k}"', v) for k, v in engine.success.items()])
    out.extend(engine.ttft.lines("vllm:time_to_first_token_seconds", lab))
    out.extend(engine.itl.lines("vllm:inter_token_latency_seconds", lab))
    out.extend(engine.e2e.lines("vllm:e2e_request_latency_seconds", lab))
    out.extend(engine.queue.lines("vllm:request_queue_time_seconds", lab))
    out.append("# HELP process_start_time_seconds Start time of the process since unix epoch in seconds.")
    out.append("# TYPE process_start_time_seconds gauge")
    out.append(f"process_start_time_seconds {created}")
    return "\n".join(out) + "\n"


def now_wall() -> float:
    """Wall-clock time for ``_created`` gauges."""
    return time.time()
