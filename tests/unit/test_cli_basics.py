"""The command frame: global options, exit codes, one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys


def amdtop(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "amdtop", *args], capture_output=True, text=True, timeout=60)


def test_demo_snapshot_json_has_contract_keys() -> None:
    out = amdtop("snapshot", "--json", "--demo")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    for key in ("backend", "hostname", "timestamp", "gpus", "links", "numa_nodes", "workers", "flags"):
        assert key in doc
    assert doc["backend"] == "sim"
    assert len(doc["gpus"]) == 8
    assert len(doc["links"]) == 28
    assert all(link["a"] < link["b"] and link["type"] == "XGMI" for link in doc["links"])
    assert doc["gpus"][0]["vram_total_bytes"] == 206141652992
    assert [n["id"] for n in doc["numa_nodes"]] == [0, 1]


def test_global_options_before_or_after_command() -> None:
    a = amdtop("--demo", "topo", "--json")
    b = amdtop("topo", "--json", "--demo")
    assert a.returncode == b.returncode == 0
    assert json.loads(a.stdout)["links"] == json.loads(b.stdout)["links"]


def test_unknown_backend_is_one_line_exit_2() -> None:
    out = amdtop("snapshot", "--backend", "bogus")
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("amdtop: error:") and "--backend" in lines[0]
    assert out.stdout == ""


def test_missing_sysfs_root_is_one_line_exit_2(tmp_path) -> None:  # type: ignore[no-untyped-def]
    out = amdtop("snapshot", "--backend", "sysfs", "--sysfs-root", str(tmp_path / "nope"))
    assert out.returncode == 2
    assert out.stderr.startswith("amdtop: error: --sysfs-root")
    assert len(out.stderr.strip().splitlines()) == 1


def test_topo_text_is_a_matrix_with_numa_columns() -> None:
    out = amdtop("topo", "--demo")
    assert out.returncode == 0
    header = out.stdout.splitlines()[0]
    assert header.split()[:8] == [f"GPU{i}" for i in range(8)]
    assert "NUMA" in header and "CPU Affinity" in header
    row4 = out.stdout.splitlines()[5]
    assert row4.startswith("GPU4") and "32-63,96-127" in row4
