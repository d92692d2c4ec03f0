"""What the holdout tests read a failure-corpus capture with: its incidents as `logs parse --json` gives them, their
kinds, and the catalog entry that claims one line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from amdtop.logread.catalog import load_catalog
from amdtop.logread.incidents.model import incident_json
from amdtop.logread.match import Matcher
from amdtop.logread.prefix import read_head
from amdtop.logread.rccl.files import parse_files

CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "failure_corpus"


def incidents(rel: str) -> list[dict[str, Any]]:
    """The incidents of ``CORPUS/rel``, in their JSON form."""
    return [incident_json(i) for i in parse_files([CORPUS / rel]).incidents]


def kinds(found: list[dict[str, Any]]) -> list[str]:
    return [str(i["kind"]) for i in found]


def entry_of(line: str) -> str | None:
    """The id of the catalog entry that reads ``line`` (after its known prefixes), ``None`` when none does."""
    m = Matcher(load_catalog()).match(read_head(line).text)
    return m.entry.id if m else None
