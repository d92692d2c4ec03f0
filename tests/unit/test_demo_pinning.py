"""Demo workers pin where the host allows and run unpinned otherwise; real workers get one line naming the field."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import tomlkit

from amdtop.errors import InputError
from amdtop.supervisor.demo import demo_pinning, demo_pinning_note, demo_profiles_text
from amdtop.supervisor.launchspec import host_numa_nodes, preflight
from amdtop.supervisor.profiles import profiles_from_document
from amdtop.telemetry.sim import SimBackend


def nodes(tmp: Path, *ids: int) -> Path:
    root = tmp / "node"
    root.mkdir()
    for i in ids:
        (root / f"node{i}").mkdir()
    (root / "possible").write_text("0\n")  # files beside the node folders are not nodes
    return root


def with_numactl(tmp: Path) -> dict[str, str]:
    bin_dir = tmp / "bin"
    bin_dir.mkdir()
    tool = bin_dir / "numactl"
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o755)
    return {"PATH": str(bin_dir)}


def test_host_numa_nodes(tmp_path: Path) -> None:
    assert host_numa_nodes(nodes(tmp_path, 0, 2)) == [0, 2]
    assert host_numa_nodes(tmp_path / "missing") == []


def test_demo_pins_where_the_host_allows(tmp_path: Path) -> None:
    root = nodes(tmp_path, 0)
    env = with_numactl(tmp_path)
    assert demo_pinning(0, env, root) == (0, "")
    assert demo_pinning(1, env, root) == (None, "NUMA node 1 is not on this host")
    assert demo_pinning(0, {"PATH": str(tmp_path / "empty")}, root) == (None, "numactl is not installed")
    assert demo_pinning(None, {}, root) == (None, "")


def test_demo_note_names_the_unpinned_workers_and_why(tmp_path: Path) -> None:
    topo = SimBackend().topology()
    profiles = profiles_from_document(tomlkit.parse(demo_profiles_text(topo, 18300)), "demo.toml")
    root = nodes(tmp_path, 0)
    env = with_numactl(tmp_path)
    # The simulated node puts GPUs 0-3 on node 0 and 4-7 on node 1; this host has node 0 only.
    assert demo_pinning_note(profiles, topo, env, root) == (
        "demo workers run unpinned: qwen-32b, mistral-7b (NUMA node 1 is not on this host)"
    )
    assert demo_pinning_note(profiles, topo, {"PATH": "/nonexistent"}, root) == (
        "demo workers run unpinned: llama-70b, qwen-32b, mistral-7b (numactl is not installed)"
    )
    (tmp_path / "both").mkdir()
    assert demo_pinning_note(profiles, topo, env, nodes(tmp_path / "both", 0, 1)) is None


def test_preflight_names_numa_node_when_the_host_lacks_it(tmp_path: Path) -> None:
    env = with_numactl(tmp_path)
    # Outside the demo (issue 13, item 10): "auto" on a simulated topology resolves to node 1, which this host lacks;
    # one line naming the field instead of numactl's usage text.
    topo = SimBackend().topology()
    [_, qwen, _] = profiles_from_document(tomlkit.parse(demo_profiles_text(topo, 18300)), "w.toml")
    with pytest.raises(InputError) as exc:
        preflight(qwen, 1, env, check_port=False, node_root=nodes(tmp_path, 0))
    assert str(exc.value) == (
        "worker[qwen-32b].numa_node: pinning to NUMA node 1 is asked but this host has NUMA nodes 0; "
        'set numa_node to one of them or "none"'
    )
    with pytest.raises(InputError, match="this host lists no NUMA nodes"):
        preflight(qwen, 0, env, check_port=False, node_root=tmp_path / "none")


@pytest.mark.skipif(host_numa_nodes() != [0], reason="the message below is for a one-node host")
@pytest.mark.skipif(shutil.which("numactl") is None, reason="numactl not installed")
def test_cli_launch_on_missing_node_is_one_line(tmp_path: Path) -> None:
    topo = SimBackend().topology()
    config = tmp_path / "w.toml"
    config.write_text(demo_profiles_text(topo, 18310))
    proc = subprocess.run(
        [sys.executable, "-m", "amdtop", "--backend", "sim", "workers", "launch", "qwen-32b", "--config", str(config),
         "--state-dir", str(tmp_path / "state")],
        capture_output=True, text=True, timeout=60, env={**os.environ},
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "amdtop: error: worker[qwen-32b].numa_node: pinning to NUMA node 1 is asked but this host has NUMA nodes 0; "
        'set numa_node to one of them or "none"'
    ], proc.stderr
