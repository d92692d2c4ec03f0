"""SGLang ``/metrics`` names across releases, each tied to the vLLM key (:mod:`amdtop.vllm_metric_names`) it fills.

SGLang exports two kinds of series. The scheduler's (running, queued, token usage, throughput, cache hit rate, queue
time) carry ``tp_rank``/``pp_rank`` (from 2025), ``engine_type`` and, with data parallelism, ``dp_rank`` (plus ``pid``
in some builds); only the stats-logging rank of each DP group exports them unless ``--enable-metrics-for-all-schedulers``
is set. The tokenizer manager's (token counters, TTFT, inter-token latency) carry ``model_name`` only: they are the
whole server's, never one DP rank's. Releases before 0.4 labelled everything ``name`` and called the request gauges
``num_requests_running``/``num_requests_waiting``.

Every name below was seen in a real page (``tests/fixtures/sglang_metrics/``, the source in each fixture's first line)
or in SGLang's collector source (``python/sglang/srt/metrics/collector.py``, named in the row).
"""

from __future__ import annotations

from dataclasses import dataclass

COLLECTOR = "https://github.com/sgl-project/sglang/blob/main/python/sglang/srt/metrics/collector.py"


@dataclass(frozen=True, slots=True)
class SGLangName:
    """One SGLang metric under all the names it had, and the vLLM key amdtop files it under."""

    key: str
    """The :mod:`amdtop.vllm_metric_names` key it fills (``gen_throughput``, ``cache_hit_rate``, ``kv_cache_tokens``:
    SGLang's own, kept under their SGLang names)."""
    names: tuple[str, ...]
    """Sample names, newest first."""
    kind: str
    """``gauge``, ``counter`` or ``histogram``."""
    level: str
    """``scheduler`` (per DP rank) or ``tokenizer`` (the whole server)."""
    unit: str
    """What a value counts."""
    changed_in: str
    """When the newest name came, or ``-``."""
    source: str
    """Where the names were seen."""


TABLE: tuple[SGLangName, ...] = (
    SGLangName(
        "running",
        ("sglang:num_running_reqs", "sglang:num_requests_running"),
        "gauge",
        "scheduler",
        "requests",
        "after PR #1461 (2024-09), by PR #4444 (2025-03)",
        "https://github.com/sgl-project/sglang/pull/4444, https://github.com/sgl-project/sglang/pull/1461",
    ),
    SGLangName(
        "waiting",
        ("sglang:num_queue_reqs", "sglang:num_requests_waiting"),
        "gauge",
        "scheduler",
        "requests",
        "after PR #1461 (2024-09), by the docs page",
        "docs/references/production_metrics.md, https://github.com/sgl-project/sglang/pull/1461",
    ),
    SGLangName(
        "kv_cache_usage",
        ("sglang:token_usage",),
        "gauge",
        "scheduler",
        "fraction 0..1 of the KV token pool",
        "-",
        "docs/references/production_metrics.md, https://github.com/vllm-project/aibrix/issues/1614",
    ),
    SGLangName(
        "gen_throughput",
        ("sglang:gen_throughput",),
        "gauge",
        "scheduler",
        "tokens/s at the last decode log interval (holds its value when idle: sgl-project/sglang#4244)",
        "-",
        "https://github.com/vllm-project/aibrix/issues/1614",
    ),
    SGLangName(
        "cache_hit_rate",
        ("sglang:cache_hit_rate",),
        "gauge",
        "scheduler",
        "fraction 0..1 (a percentage in PR #1461's page)",
        "-",
        "docs/references/production_metrics.md, https://github.com/sgl-project/sglang/pull/1461",
    ),
    SGLangName(
        "kv_cache_tokens",
        ("sglang:max_total_num_tokens",),
        "gauge",
        "scheduler",
        "tokens the KV pool holds (vLLM: kv_cache_size_tokens of vllm:cache_config_info)",
        "-",
        f"https://github.com/sgl-project/sglang/pull/1853, {COLLECTOR}",
    ),
    SGLangName(
        "generation_tokens",
        ("sglang:generation_tokens_total",),
        "counter",
        "tokenizer",
        "tokens",
        "-",
        "docs/references/production_metrics.md",
    ),
    SGLangName(
        "prompt_tokens",
        ("sglang:prompt_tokens_total",),
        "counter",
        "tokenizer",
        "tokens",
        "-",
        "docs/references/production_metrics.md, https://github.com/sgl-project/sglang/pull/1853",
    ),
    SGLangName(
        "prefix_cache_queries",
        ("sglang:prompt_tokens_total",),
        "counter",
        "tokenizer",
        "prompt tokens (every prompt token is looked up in the radix cache)",
        "-",
        "docs/references/production_metrics.md",
    ),
    SGLangName(
        "prefix_cache_hits",
        ("sglang:cached_tokens_total",),
        "counter",
        "tokenizer",
        "prompt tokens found in the radix cache",
        "-",
        "https://github.com/sgl-project/sglang/pull/7944",
    ),
    SGLangName(
        "requests_finished",
        ("sglang:num_requests_total",),
        "counter",
        "tokenizer",
        "requests finished",
        "PR #2859",
        "https://github.com/sgl-project/sglang/pull/7944",
    ),
    SGLangName(
        "preemptions",
        ("sglang:num_retracted_requests_total",),
        "counter",
        "scheduler",
        "requests retracted (SGLang's preemption)",
        "collector.py (beside the older gauge sglang:num_retracted_reqs)",
        COLLECTOR,
    ),
    SGLangName(
        "ttft",
        ("sglang:time_to_first_token_seconds",),
        "histogram",
        "tokenizer",
        "seconds",
        "-",
        "docs/references/production_metrics.md",
    ),
    SGLangName(
        "inter_token_latency",
        ("sglang:inter_token_latency_seconds", "sglang:time_per_output_token_seconds"),
        "histogram",
        "tokenizer",
        "seconds",
        "2025 (collector.py; time_per_output_token_seconds in the docs page)",
        f"{COLLECTOR}, docs/references/production_metrics.md",
    ),
    SGLangName(
        "queue_time",
        ("sglang:queue_time_seconds",),
        "histogram",
        "scheduler",
        "seconds",
        "PR #4444 (March 2025)",
        f"https://github.com/sgl-project/sglang/pull/4444, {COLLECTOR}",
    ),
)
"""Every SGLang metric amdtop reads."""

BY_KEY: dict[str, SGLangName] = {m.key: m for m in TABLE}

RANK_LABELS = ("dp_rank", "tp_rank", "pp_rank", "moe_ep_rank", "pid", "engine_type", "name")
"""Labels an SGLang series carries that amdtop folds into its ``engine`` label (the DP rank) or drops."""


def markdown_table() -> str:
    """The table as Markdown (docs/sglang-metrics.md is generated from it and a test keeps the two equal)."""
    rows = [
        "| key | newest name | older names | kind | level | unit | changed in | source |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for m in TABLE:
        older = ", ".join(f"`{n}`" for n in m.names[1:]) or "-"
        rows.append(
            f"| {m.key} | `{m.names[0]}` | {older} | {m.kind} | {m.level} | {m.unit} | {m.changed_in} | {m.source} |"
        )
    return "\n".join(rows) + "\n"
