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

KNOWN_MISSES = {
    "ray/actor_never_ran_worker_nccl_invalid_usage_vllm_427": (
        "the person names the worker's death (Ray's 'Unhandled exception: St13runtime_error. what(): ...' line, "
        "whose emitter was not found in Ray's source); the reader names the NCCL 'invalid usage' it quotes "
        "(comm_init_failed), since a quoted emitter's entry wins the line"
    ),
}
"""Logs the reader still misreads, each with why (docs/benchmarks.md lists them): strict, so a fix must take the
log off this list."""


def _param(e: Entry) -> object:
    slug = f"{e.family}/{e.log.stem}"
    why = KNOWN_MISSES.get(slug)
    marks = [pytest.mark.xfail(strict=True, reason=why)] if why else []
    return pytest.param(e, id=slug, marks=marks)


@pytest.mark.parametrize("entry", [_param(e) for e in JOB_LOGS])
def test_the_job_corpus_is_read_as_a_person_would(entry: Entry) -> None:
    incidents = [incident_json(i) for i in parse_files([entry.log]).incidents]
    hit, why = _bench().judge(entry, incidents, "")
    assert hit, f"{entry.log.name} ({entry.meta.get('source')}): {why}"
