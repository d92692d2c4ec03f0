"""Real NCCL 2.28.9 logs captured on an H200 (tests/fixtures/nccl/, one GPU: 1 rank, 1 rank with P2P disabled,
2 ranks on the same GPU failing with "Duplicate GPU detected")."""

from __future__ import annotations

from pathlib import Path

from amdtop.logread.rccl.diagnose import diagnose
from amdtop.logread.rccl.parser import parse_files
from amdtop.model import FlagKind

NCCL = Path(__file__).resolve().parents[1] / "fixtures" / "nccl"


def _files(prefix: str) -> list[Path]:
    return sorted(p for p in NCCL.glob(f"{prefix}.*") if p.name.split(".")[1] in ("stdout", "rank0", "rank1"))


def test_one_rank_run() -> None:
    rep = parse_files(_files("h200-1rank"))
    assert (rep.library, rep.version, rep.files) == ("NCCL", "2.28.9", 2)
    (comm,) = rep.comms
    assert comm.id == "0x154a1ed2e4d1a535" and comm.nranks == 1 and comm.nnodes == 1
    (r,) = comm.ranks
    assert (r.rank, r.dev, r.bus_id, r.host, r.init_complete) == (0, 0, "60", "vm", True)
    assert r.init_s is not None and r.init_s > 0
    assert comm.ended == "destroyed" and comm.coll_channels == 64
    assert comm.summary == "1 rank, no peers (destroyed)"
    assert rep.errors == () and rep.warnings == ()
    assert rep.unknown_lines <= 2  # the test program's own "all-reduce value" lines


def test_p2p_disable_is_echoed() -> None:
    rep = parse_files(_files("h200-1rank-p2pdisable"))
    env = {e.name: (e.value, e.known) for e in rep.env}
    assert env["NCCL_P2P_DISABLE"] == ("1", True)
    assert env["NCCL_NVLS_ENABLE"] == ("0", True)


def test_duplicate_gpu_failure() -> None:
    rep = parse_files(_files("h200-2rank-same-gpu"))
    (comm,) = rep.comms
    assert comm.nranks == 2 and [(r.rank, r.pid, r.bus_id) for r in comm.ranks] == [(0, 649, "60"), (1, 650, "60")]
    assert not any(r.init_complete for r in comm.ranks)
    assert [(w.rank, w.text.split(":")[0]) for w in rep.warnings] == [
        (0, "Duplicate GPU detected "),
        (1, "Duplicate GPU detected "),
    ]
    assert all(dict(w.extra)["time"] == "2026-11-29 14:41:40" for w in rep.warnings)
    trails = [e for e in rep.errors if e.kind == "error_trail"]
    assert [e.rank for e in trails] == [0, 1]
    facts = dict(trails[0].extra)
    assert facts["result"] == 5 and len(facts["trail"]) == 5 and "invalid usage" in trails[0].text
    assert [e.kind for e in rep.errors if e.kind != "error_trail"] == ["exception"]
    flags = diagnose(rep, None, "tp2")
    assert len(flags) == 3 and {f.kind for f in flags} == {FlagKind.NCCL_ERROR}
