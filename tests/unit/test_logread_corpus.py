"""Every job log of the failure corpus (public captures, each with its source in the .toml beside it, verdicts written
before any parse: CORPUS.md) read as a person would: the reader's incidents meet the verdict, judged by the bench's
own rule (bench/failure_corpus.py ``judge``), in-process. A log the corpus engineers add is a test here at once."""

from __future__ import annotations

import importlib.util
import sys
from functools import cache
from pathlib import Path
from types import ModuleType

import pytest

from amdtop.logread.incidents.model import incident_json
from amdtop.logread.rccl.files import parse_files
from tests.fixtures.failure_corpus.corpus import Entry, entries

ROOT = Path(__file__).resolve().parents[2]
JOB_FAMILIES = ("nccl", "pytorch", "runtime", "serving", "ray")


@cache
def _bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("failure_corpus_bench_logread", ROOT / "bench" / "failure_corpus.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


JOB_LOGS = [e for e in entries() if e.family in JOB_FAMILIES]


@pytest.mark.parametrize("entry", JOB_LOGS, ids=[f"{e.family}/{e.log.stem}" for e in JOB_LOGS])
def test_the_job_corpus_is_read_as_a_person_would(entry: Entry) -> None:
    incidents = [incident_json(i) for i in parse_files([entry.log]).incidents]
    hit, why = _bench().judge(entry, incidents, "")
    assert hit, f"{entry.log.name} ({entry.meta.get('source')}): {why}"
