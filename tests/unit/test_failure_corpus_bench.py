"""bench/failure_corpus.py's matching, as CORPUS.md states it: a hit needs one incident that meets every verdict
field given, and no incident of a ruled-out kind (the figure in docs/benchmarks.md rests on this)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.fixtures.failure_corpus.corpus import Entry

BENCH = Path(__file__).resolve().parents[2] / "bench" / "failure_corpus.py"


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("failure_corpus_bench", BENCH)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def entry(**verdict: Any) -> Entry:
    return Entry(log=Path("x.log"), family="pytorch", meta={"input": "job", "verdict": {"person": "p", **verdict}})


TIMEOUT = {
    "kind": "collective_timeout",
    "summary": "ranks 0, 1 timed out on ALLREDUCE SeqNum 808; rank 3 did not report",
    "ranks": [0, 1],
    "laggard": None,
    "devices": [0, 1, 2],
    "cause": "a rank that did not join",
    "detail": {"seq": 808},
}


def test_an_incident_meeting_every_field_is_a_hit(bench: ModuleType) -> None:
    e = entry(kind=["collective_timeout"], ranks=[1, 0], laggard=-1, devices=[2], mentions=["seqnum 808"])
    assert bench.judge(e, [TIMEOUT], "") == (True, "")


@pytest.mark.parametrize(
    ("verdict", "why"),
    [
        ({"kind": ["peer_lost"]}, "kind collective_timeout not in"),
        ({"kind": ["collective_timeout"], "ranks": [0]}, "ranks [0, 1] != [0]"),
        ({"kind": ["collective_timeout"], "laggard": 3}, "laggard None != 3"),
        ({"kind": ["collective_timeout"], "devices": [5]}, "lack [5]"),
        ({"kind": ["collective_timeout"], "mentions": ["10.1.2.3"]}, "does not mention '10.1.2.3'"),
        ({"kind": ["collective_timeout"], "not_mentions": ["did not report"]}, "claims 'did not report'"),
        ({"kind": ["collective_timeout"], "no_incident_kinds": ["collective_timeout"]}, "rules out"),
    ],
)
def test_each_field_can_make_a_miss(bench: ModuleType, verdict: dict[str, Any], why: str) -> None:
    hit, reason = bench.judge(entry(**verdict), [TIMEOUT], "")
    assert not hit and why in reason


def test_one_matching_incident_among_others_is_enough(bench: ModuleType) -> None:
    other = {"kind": "peer_lost", "summary": "peer 10.1.2.3 closed the connection", "ranks": [3]}
    e = entry(kind=["peer_lost"], mentions=["10.1.2.3"])
    assert bench.judge(e, [TIMEOUT, other], "") == (True, "")


def test_no_incident_says_what_was_seen(bench: ModuleType) -> None:
    hit, reason = bench.judge(entry(kind=["gpu_oom"]), [], "flags only: nccl_error")
    assert not hit and reason == "no incident (flags only: nccl_error)"
