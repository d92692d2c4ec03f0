"""Diagnosis against known topologies (the simulated MI300X and PCIe nodes), and ``amdtop logs parse``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from amdtop.cli.main import main
from amdtop.logread.rccl.diagnose import diagnose, rank_gpus
from amdtop.logread.rccl.grammar import bus_id_of_bdf
from amdtop.logread.rccl.parser import LogParser
from amdtop.model import FlagKind
from amdtop.telemetry.sim import SimBackend
from tests.fixtures.rccl.make_logs import nccl_rank_lines, rccl_rank_lines, write_rank_logs


def _report(nranks: int, **kw):  # type: ignore[no-untyped-def]
    p = LogParser()
    for r in range(nranks):
        p.feed_lines(rccl_rank_lines(r, nranks, **kw), f"rank{r}.log")
    return p.report()


def test_bus_id_of_bdf() -> None:
    assert bus_id_of_bdf("0000:c1:00.0") == "c1000"
    assert bus_id_of_bdf("0000:05:00.0") == "5000"
    assert bus_id_of_bdf("0001:05:00.1") == "105001"


def test_ranks_match_gpus_by_bus_id() -> None:
    topo = SimBackend().topology()
    rep = _report(4)
    assert rank_gpus(rep.comms[0], topo) == {0: 0, 1: 1, 2: 2, 3: 3}


def test_shm_between_xgmi_gpus_is_a_fallback() -> None:
    topo = SimBackend().topology()
    flags = diagnose(_report(4, transport="SHM/direct"), topo, worker="llama-a")
    (flag,) = flags
    assert flag.kind is FlagKind.TRANSPORT_FALLBACK
    assert flag.worker == "llama-a" and flag.gpus == (0, 1, 2, 3)
    assert "SHM/direct" in flag.message and "XGMI" in flag.message
    assert dict(flag.extra)["pairs"] == ((0, 1), (1, 2), (2, 3), (3, 0))


def test_p2p_is_not_a_fallback_and_no_topology_means_no_judgement() -> None:
    topo = SimBackend().topology()
    assert diagnose(_report(4), topo) == []
    assert diagnose(_report(4, transport="NET/Socket/0"), None) == []


def test_shm_without_direct_link_is_not_flagged() -> None:
    topo = SimBackend(scenario="pcie-4").topology()
    p = LogParser()
    bus = tuple(bus_id_of_bdf(g.bdf) for g in topo.gpus)
    for r in range(4):
        p.feed_lines(nccl_rank_lines(r, 4, transport="SHM/direct/direct", bus=bus), f"r{r}")
    rep = p.report()
    assert len(rank_gpus(rep.comms[0], topo)) == 4
    assert diagnose(rep, topo) == []


def test_errors_and_timeouts_come_first() -> None:
    topo = SimBackend().topology()
    flags = diagnose(_report(2, errors=True, transport="SHM/direct"), topo)
    kinds = [f.kind for f in flags]
    assert (
        kinds[:3] == [FlagKind.NCCL_ERROR, FlagKind.NCCL_ERROR, FlagKind.NCCL_ERROR] or FlagKind.NCCL_TIMEOUT in kinds
    )
    assert kinds[-1] is FlagKind.TRANSPORT_FALLBACK
    assert kinds.count(FlagKind.NCCL_TIMEOUT) == 2  # one watchdog line per rank
    assert all(k is not FlagKind.TRANSPORT_FALLBACK for k in kinds[:-1])


def test_cli_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    paths = write_rank_logs(tmp_path, 4, transport="SHM/direct")
    assert main(["logs", "parse", *map(str, paths), "--json", "--demo", "--topo"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["library"] == "RCCL" and doc["files"] == 4 and doc["transports"] == {"SHM/direct": 16}
    assert doc["comms"][0]["summary"] == "4 ranks, all pairs SHM/direct (GPUs 0,1,2,3)"
    assert [f["kind"] for f in doc["flags"]] == ["transport_fallback"]


def test_cli_human_and_bad_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    paths = write_rank_logs(tmp_path, 2)
    assert main(["logs", "parse", *map(str, paths)]) == 0
    out = capsys.readouterr().out
    assert "comm 0x551d06754c6bacf2: 2 ranks, all pairs P2P/IPC" in out
    missing = tmp_path / "missing.log"
    assert main(["logs", "parse", str(paths[0]), str(missing)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    err = captured.err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("amdtop: error:") and str(missing) in err[0]


def test_comm_summary_names_the_link_and_gpus() -> None:
    from amdtop.logread.rccl.diagnose import comm_summary

    topo = SimBackend().topology()
    comm = _report(4).comms[0]
    assert comm_summary(comm, topo) == "4 ranks, all pairs P2P/IPC over XGMI (GPUs 0,1,2,3)"
    assert comm_summary(comm, None) == "4 ranks, all pairs P2P/IPC"
    shm = _report(4, transport="SHM/direct").comms[0]
    assert comm_summary(shm, topo) == "4 ranks, all pairs SHM/direct (GPUs 0,1,2,3)"
