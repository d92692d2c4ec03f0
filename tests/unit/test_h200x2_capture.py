"""Real captures from two NVLink-connected H200s (nvidia-h200-x2): the NVML backend replayed, and the 2-rank NCCL
logs with and without NCCL_P2P_DISABLE=1 diagnosed against that topology."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from amdtop.logread.rccl.diagnose import diagnose
from amdtop.logread.rccl.parser import parse_files
from amdtop.model import FlagKind, LinkType
from amdtop.report import snapshot_json
from amdtop.telemetry.base import BackendOptions
from amdtop.telemetry.nvml import NvmlBackend
from amdtop.telemetry.nvml_replay import ReplayNvml, load_fixture, materialize

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def _backend(tmp_path: Path) -> tuple[NvmlBackend, dict[str, Any]]:
    fixture = load_fixture(FIXTURES / "nvml" / "h200x2_replay.json")
    sysfs, proc = materialize(fixture, tmp_path)
    return NvmlBackend(ReplayNvml(fixture), BackendOptions(sysfs_root=sysfs, proc_root=proc)), fixture


def _strip(doc: dict[str, Any]) -> dict[str, Any]:
    doc = copy.deepcopy(doc)
    doc.pop("timestamp", None)
    return doc


def test_two_h200_replay_gives_nvlink_18_and_the_recorded_snapshot(tmp_path: Path) -> None:
    backend, fixture = _backend(tmp_path)
    for _ in range(fixture["meta"]["polls"]):
        snap = backend.sample()
    topo = snap.topology
    assert [g.name for g in topo.gpus] == ["NVIDIA H200", "NVIDIA H200"]
    (link,) = topo.links
    assert (link.a, link.b, link.type, link.nvlinks) == (0, 1, LinkType.NVLINK, 18)  # nvidia-smi topo -m: NV18
    assert _strip(snapshot_json(snap))["links"] == _strip(fixture["expected_snapshot"])["links"]
    assert [g["bdf"] for g in snapshot_json(snap)["gpus"]] == [g["bdf"] for g in fixture["expected_snapshot"]["gpus"]]


def test_two_rank_logs_p2p_over_nvlink_and_shm_fallback_flagged(tmp_path: Path) -> None:
    backend, _ = _backend(tmp_path)
    topo = backend.topology()
    nccl = FIXTURES / "nccl"
    p2p = parse_files(sorted(nccl.glob("h200x2-2rank.rank*.log")))
    (comm,) = p2p.comms
    assert comm.nranks == 2 and {e.transport for e in comm.edges} == {"P2P/CUMEM"}
    assert [(r.rank, r.dev, r.bus_id) for r in comm.ranks] == [(0, 0, "60"), (1, 1, "70")]
    assert diagnose(p2p, topo, "tp2") == []
    shm = parse_files(sorted(nccl.glob("h200x2-2rank-p2pdisable.rank*.log")))
    assert {e.transport for c in shm.comms for e in c.edges} == {"SHM/direct/direct"}
    flags = diagnose(shm, topo, "tp2")
    assert [f.kind for f in flags] == [FlagKind.TRANSPORT_FALLBACK]
    assert flags[0].gpus == (0, 1) and flags[0].worker == "tp2"
