"""The probe's results cached in the state dir (``<state_dir>/probe.json``), read by the topology pane."""

from __future__ import annotations

import json
from pathlib import Path

from amdtop.private_files import make_private_dirs, write_private
from amdtop.probe.model import ProbeResults, results_from_json, results_json
from amdtop.sysread import read_text

CACHE_NAME = "probe.json"


def cache_path(state_dir: Path) -> Path:
    """Where the cached results live."""
    return state_dir / CACHE_NAME


def save_results(state_dir: Path, results: ProbeResults) -> Path:
    """Write ``results`` atomically (a reader never sees half a file); returns the path."""
    make_private_dirs(state_dir)
    path = cache_path(state_dir)
    write_private(path, json.dumps(results_json(results), indent=1) + "\n")
    return path


def load_results(state_dir: Path) -> ProbeResults | None:
    """The cached results, or ``None`` when there are none or the file is unreadable or malformed."""
    try:
        doc = json.loads(read_text(cache_path(state_dir)))
        return results_from_json(doc)
    except (OSError, ValueError, KeyError, TypeError):
        return None
