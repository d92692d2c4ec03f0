"""Every failure-corpus entry is well formed (issue 48, CORPUS.md): a source URL, a kind of the vocabulary, a valid
input, a non-empty log, a verdict a person wrote. This checks the corpus's form, not how well the reader reads it
(that is bench/failure_corpus.py's figure)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fixtures.failure_corpus.corpus import FAMILIES, HERE, Entry, entries, problems

ENTRIES = entries()


def test_the_corpus_is_there() -> None:
    families = {e.family for e in ENTRIES}
    assert len(ENTRIES) >= 35, f"only {len(ENTRIES)} logs under {HERE}"
    assert {"nccl", "pytorch", "runtime", "serving", "ray"} <= families


@pytest.mark.parametrize("entry", ENTRIES, ids=[e.slug for e in ENTRIES])
def test_entry_is_well_formed(entry: Entry) -> None:
    assert problems(entry) == []


def test_no_verdict_without_its_log() -> None:
    orphans = [t for t in HERE.glob("*/*.toml") if not t.with_suffix(".log").is_file()]
    assert orphans == []


def test_only_family_directories() -> None:
    dirs = {p.name for p in HERE.iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert dirs <= set(FAMILIES)


GOOD = """source = "https://github.com/NVIDIA/nccl/issues/1"
title = "t"
captured = true
input = "job"
emitters = ["nccl"]

[verdict]
kind = ["peer_lost"]
person = "p"
"""


def _entry(tmp_path: Path, toml: str, log: str = "x NCCL WARN y\n", family: str = "nccl") -> Entry:
    d = tmp_path / family
    d.mkdir(exist_ok=True)
    (d / "a.log").write_text(log)
    (d / "a.toml").write_text(toml)
    (e,) = entries(tmp_path)
    return e


def test_a_good_entry_passes(tmp_path: Path) -> None:
    assert problems(_entry(tmp_path, GOOD)) == []


@pytest.mark.parametrize(
    ("toml", "log", "family", "field"),
    [
        (GOOD.replace('source = "https://github.com/NVIDIA/nccl/issues/1"', 'source = ""'), "x\n", "nccl", "source"),
        (GOOD.replace('"peer_lost"', '"rank_crash"'), "x\n", "nccl", "verdict.kind"),
        (GOOD.replace('input = "job"', 'input = "dmesg"'), "x\n", "nccl", "input"),
        (GOOD, "  \n", "nccl", "empty"),
        (GOOD, "x\n", "misc", "family directory"),
        (GOOD.replace("captured = true", "captured = false"), "x\n", "nccl", "captured = false"),
        (GOOD + "laggard = -2\n", "x\n", "nccl", "verdict.laggard"),
        (GOOD + 'no_incident_kinds = ["peer_lost"]\n', "x\n", "nccl", "contradicts"),
        (GOOD + "rank = [3]\n", "x\n", "nccl", "unknown fields"),
        (GOOD.replace('person = "p"\n', ""), "x\n", "nccl", "verdict.person"),
    ],
)
def test_each_defect_is_named(tmp_path: Path, toml: str, log: str, family: str, field: str) -> None:
    found = problems(_entry(tmp_path, toml, log, family))
    assert any(field in p for p in found), found


def test_a_log_without_its_toml_is_named(tmp_path: Path) -> None:
    (tmp_path / "ray").mkdir()
    (tmp_path / "ray" / "b.log").write_text("x\n")
    (e,) = entries(tmp_path)
    assert problems(e) == ["ray/b: no b.toml beside the log; write its source and verdict"]
