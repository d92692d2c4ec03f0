"""`amdtop snapshot --json` carries the analysis flags of discovered vLLM workers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from amdtop.analysis import discover
from amdtop.cli import main as cli_main
from amdtop.model import WorkerState, WorkerStatus
from amdtop.runtime.spec import NodeSpec
from amdtop.telemetry.sim import GIB, GpuDemand, SimBackend


def test_snapshot_json_flags_imbalance_of_discovered_worker(monkeypatch: pytest.MonkeyPatch, capsys: Any) -> None:
    sim = SimBackend(seed=3)
    sim.name = "fake"  # a real-backend stand-in: discovery runs
    sim.set_demand("w", {0: GpuDemand(0.9, 100 * GIB), 1: GpuDemand(0.3, 100 * GIB)})
    found = WorkerStatus("vllm-4242", WorkerState.READY, (0, 1), pid=4242, source="discovered")
    monkeypatch.setattr(NodeSpec, "open_backend", lambda _spec: sim)
    monkeypatch.setattr(discover, "discover_vllm", lambda proc, gpu_pids, among=None: [found])
    assert cli_main.main(["snapshot", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["workers"][0]["name"] == "vllm-4242" and doc["workers"][0]["gpus"] == [0, 1]
    flags = [f for f in doc["flags"] if f["kind"] == "tp_imbalance"]
    assert len(flags) == 1 and flags[0]["worker"] == "vllm-4242" and flags[0]["metric"] == "util_pct"
    assert flags[0]["spread_pct"] > 50


def test_window_option_rejects_bad_values(capsys: Any, tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as exc:
        cli_main.main(["snapshot", "--demo", "--window", "-1"])
    assert exc.value.code == 2
    assert "--window" in capsys.readouterr().err


def test_snapshot_lists_amdtop_own_running_workers(tmp_path: Path) -> None:
    """A worker launched from a profile shows in ``snapshot --json`` workers with its real binding."""
    import subprocess
    import sys

    cfg = tmp_path / "w.toml"
    cfg.write_text(
        '[[worker]]\nname = "sim-a"\nmodel = "m"\ngpus = [0, 1]\nnuma_node = 0\nport = 18291\n'
        f'command = ["{sys.executable}", "-m", "amdtop.simserver"]\n'
    )
    base = [
        sys.executable,
        "-m",
        "amdtop",
        "--backend",
        "sim",
        "--config",
        str(cfg),
        "--state-dir",
        str(tmp_path / "st"),
    ]
    # --force: the launch gate reads the whole host, and beside this test the parallel suite runs stand-in vLLM and
    # SGLang servers that it may read as leftovers on GPUs 0-1 (it refused this launch once, session 25); the gate
    # has its own tests, this one is about the snapshot.
    launch = [*base, "workers", "launch", "sim-a", "--wait", "--timeout", "60", "--force"]
    subprocess.run(launch, check=True, capture_output=True)
    try:
        out = subprocess.run([*base, "snapshot", "--json"], check=True, capture_output=True, text=True)
        workers = json.loads(out.stdout)["workers"]
        assert [(w["name"], w["state"], w["gpus"]) for w in workers] == [("sim-a", "ready", [0, 1])]
        assert workers[0]["mems_allowed"] == [0] and workers[0]["cpu_affinity"]
    finally:
        subprocess.run([*base, "workers", "stop", "sim-a", "--grace", "5"], check=True, capture_output=True)
