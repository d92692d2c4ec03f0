"""Prometheus text exposition of the simulated server, with vLLM's metric names and labels."""

from __future__ import annotations

import bisect
from collections.abc import Sequence
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

    def lines(self, name: str, labels: str, header: bool = True) -> list[str]:
        """The ``_bucket``/``_sum``/``_count`` lines (``header``: with HELP/TYPE, once per family)."""
        out = [f"# HELP {name} Histogram of {name}.", f"# TYPE {name} histogram"] if header else []
        acc = 0
        for bound, count in zip(self.bounds, self.counts, strict=False):
            acc += count
            out.append(f'{name}_bucket{{{labels},le="{float(bound)}"}} {float(acc)}')
        out.append(f'{name}_bucket{{{labels},le="+Inf"}} {float(self.n)}')
        out.append(f"{name}_count{{{labels}}} {float(self.n)}")
        out.append(f"{name}_sum{{{labels}}} {self.total}")
        return out


SLEEP_STATES = ("awake", "weights_offloaded", "discard_all")


def render(engines: Sequence[SimEngine], created: float, sleep_level: int = 0) -> str:
    """The whole ``/metrics`` page: every family once, one series per engine (``engine="<DP rank>"``) as vLLM does."""
    cfg = engines[0].cfg
    labs = [f'engine="{i}",model_name="{cfg.model}"' for i in range(len(engines))]
    out: list[str] = []

    def gauge(name: str, values: Sequence[float], help_: str = "") -> None:
        out.extend([f"# HELP {name} {help_ or name}", f"# TYPE {name} gauge"])
        out.extend(f"{name}{{{lab}}} {float(v)}" for lab, v in zip(labs, values, strict=True))

    def counter(name: str, rows: Sequence[Sequence[tuple[str, float]]]) -> None:
        base = name.removesuffix("_total")
        out.extend([f"# HELP {name} {name}", f"# TYPE {name} counter"])
        for lab, per in zip(labs, rows, strict=True):
            out.extend(f"{name}{{{lab}{extra}}} {float(v)}" for extra, v in per)
        out.extend([f"# HELP {base}_created {name}", f"# TYPE {base}_created gauge"])
        for lab, per in zip(labs, rows, strict=True):
            out.extend(f"{base}_created{{{lab}{extra}}} {created}" for extra, _ in per)

    gauge(
        "vllm:num_requests_running", [len(e.running) for e in engines], "Number of requests in model execution batches."
    )
    gauge("vllm:num_requests_waiting", [len(e.waiting) for e in engines], "Number of requests waiting to be processed.")
    out.extend(["# HELP vllm:num_requests_waiting_by_reason waiting by reason",
                "# TYPE vllm:num_requests_waiting_by_reason gauge"])  # fmt: skip
    for lab, e in zip(labs, engines, strict=True):
        out.append(f'vllm:num_requests_waiting_by_reason{{{lab},reason="capacity"}} {float(len(e.waiting))}')
        out.append(f'vllm:num_requests_waiting_by_reason{{{lab},reason="deferred"}} 0.0')
    gauge("vllm:kv_cache_usage_perc", [e.kv_usage() for e in engines], "KV-cache usage. 1 means 100 percent usage.")
    out.extend(["# HELP vllm:engine_sleep_state Engine sleep state", "# TYPE vllm:engine_sleep_state gauge"])
    for level, state in enumerate(SLEEP_STATES):
        out.extend(
            f'vllm:engine_sleep_state{{{lab},sleep_state="{state}"}} {float(level == sleep_level)}' for lab in labs
        )
    out.extend(["# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig",
                "# TYPE vllm:cache_config_info gauge"])  # fmt: skip
    for lab, e in zip(labs, engines, strict=True):
        out.append(
            f'vllm:cache_config_info{{block_size="{cfg.block_size}",enable_prefix_caching="True",'
            f'gpu_memory_utilization="{cfg.gpu_memory_utilization}",kv_cache_size_tokens="{cfg.kv_cache_tokens}",'
            f'num_gpu_blocks="{e.total_blocks}",{lab}}} 1.0'
        )
    counter("vllm:prompt_tokens_total", [[("", e.prompt_tokens_total)] for e in engines])
    counter("vllm:generation_tokens_total", [[("", e.generation_tokens_total)] for e in engines])
    counter("vllm:num_preemptions_total", [[("", e.preemptions)] for e in engines])
    counter(
        "vllm:request_success_total", [[(f',finished_reason="{k}"', v) for k, v in e.success.items()] for e in engines]
    )
    for attr, name in (("ttft", "vllm:time_to_first_token_seconds"), ("itl", "vllm:inter_token_latency_seconds"),
                       ("e2e", "vllm:e2e_request_latency_seconds"), ("queue", "vllm:request_queue_time_seconds")):  # fmt: skip
        for i, (lab, e) in enumerate(zip(labs, engines, strict=True)):
            out.extend(getattr(e, attr).lines(name, lab, header=i == 0))
    if len(engines) == 1:
        # vLLM drops process_* metrics when it runs several API servers (the default with data parallelism).
        out.append("# HELP process_start_time_seconds Start time of the process since unix epoch in seconds.")
        out.append("# TYPE process_start_time_seconds gauge")
        out.append(f"process_start_time_seconds {created}")
    return "\n".join(out) + "\n"
