"""`amdtop --demo snapshot --json` right after `workers launch`: the first sample carries the launched worker's load
(the simulated GPUs used to get it only from the second tick on, so a one-shot snapshot showed them idle)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest


def _amdtop(state: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "amdtop", "--demo", "--state-dir", str(state), *args],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip


@pytest.mark.serial  # the demo profiles' fixed ports (18080...)
def test_snapshot_after_launch_shows_the_worker_on_its_gpus(tmp_path: Path) -> None:
    _amdtop(tmp_path, "workers", "launch", "llama-70b")
    try:
        doc = json.loads(_amdtop(tmp_path, "snapshot", "--json").stdout)
    finally:
        _amdtop(tmp_path, "workers", "stop", "llama-70b")
    gpus = {g["index"]: g for g in doc["gpus"]}
    (worker,) = [w for w in doc["workers"] if w["name"] == "llama-70b"]
    assert worker["gpus"] == [0, 1, 2, 3]
    for index in worker["gpus"]:
        assert gpus[index]["util_pct"] > 30, gpus[index]
        assert gpus[index]["processes"], gpus[index]
    assert all(gpus[i]["util_pct"] < 5 and not gpus[i]["processes"] for i in (4, 5, 6, 7))
