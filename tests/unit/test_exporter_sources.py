"""Where the exporter's optional facts come from (ramp results, probe cache) and the ``export`` command's errors."""

from __future__ import annotations

import json
import os
import socket
from dataclasses import dataclass
from pathlib import Path

import pytest

from amdtop.cli.main import main
from amdtop.exporter import ExportState, LinkBandwidth
from amdtop.exporter.sources import NodeProvider, bandwidth_from_probe, enrich, load_ramp_knees
from amdtop.model import Flag, FlagKind
from amdtop.telemetry.sim import SimBackend


def write_ramp(folder: Path, name: str, doc: dict[str, object], mtime: float) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.json"
    path.write_text(json.dumps(doc))
    os.utime(path, (mtime, mtime))


def test_ramp_knees_newest_per_worker(tmp_path: Path) -> None:
    ramp = tmp_path / "ramp"
    base = {"url": "http://127.0.0.1:8000", "model": "m", "steps": []}
    write_ramp(ramp, "old", {**base, "worker": "llama-a", "knee": {"concurrency": 16}}, 1000.0)
    write_ramp(
        ramp, "new", {**base, "worker": "llama-a", "knee": {"concurrency": 32}, "recommended_max_num_seqs": 32}, 2000.0
    )
    write_ramp(ramp, "llama-b", {**base, "knee": {"concurrency": 8}}, 1500.0)
    write_ramp(ramp, "noknee", {**base, "knee": None}, 1500.0)
    (ramp / "broken.json").write_text("{")
    knees = load_ramp_knees(tmp_path)
    assert [(k.worker, k.concurrency, k.recommended_max_num_seqs) for k in knees] == [
        ("llama-a", 32, 32),
        ("llama-b", 8, None),
    ]
    assert knees[0].timestamp == 2000.0


def test_ramp_knees_absent_dir(tmp_path: Path) -> None:
    assert load_ramp_knees(tmp_path / "nothing") == ()


@dataclass(frozen=True)
class Pair:
    a: int
    b: int
    gbps: float


@dataclass(frozen=True)
class PairsResult:
    pairs: tuple[Pair, ...]


@dataclass(frozen=True)
class MapResult:
    gbps: dict[tuple[int, int], float | None]


def test_probe_shapes() -> None:
    assert bandwidth_from_probe(PairsResult((Pair(2, 1, 40.0),))) == (LinkBandwidth(1, 2, 40.0),)
    assert bandwidth_from_probe(MapResult({(0, 1): 50.0, (0, 2): None})) == (LinkBandwidth(0, 1, 50.0),)
    assert bandwidth_from_probe(None) == ()


def test_enrich_keeps_caller_facts(tmp_path: Path) -> None:
    snap = SimBackend().sample()
    flag = Flag(FlagKind.NUMA_MISMATCH, "x", worker="w")
    state = enrich(snap, [], [flag], tmp_path)
    assert isinstance(state, ExportState) and state.flags == (flag,) and state.snapshot is snap


def test_node_provider_polls_backend_once_per_call(tmp_path: Path) -> None:
    sim = SimBackend()
    provider = NodeProvider(sim, state_dir=tmp_path, proc_root=tmp_path)
    a, b = provider(), provider()
    assert a.snapshot.gpus and b.snapshot.timestamp >= a.snapshot.timestamp


def isolated(tmp: Path) -> list[str]:
    return ["--config", str(tmp / "workers.toml"), "--state-dir", str(tmp / "state")]


def test_cli_bad_listen_exits_2(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["export", "--demo", "--listen", "nohostport", *isolated(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("amdtop: error: --listen:")


def test_cli_port_in_use_exits_1(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 19414))
        sock.listen(1)
        assert main(["export", "--demo", "--listen", "127.0.0.1:19414", *isolated(tmp_path)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["amdtop: error: --listen: 127.0.0.1:19414 is already in use; pick another port with --listen"]
