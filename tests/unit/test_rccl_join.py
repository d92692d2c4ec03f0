"""One communicator across processes, hosts and files; return-code traces judged; warnings grouped.

Logs are built from the amd.md §6 grammar (tests/fixtures/rccl/make_logs.py), so the expected values are known exactly.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from amdtop.cli.main import main
from amdtop.logread.rccl.diagnose import diagnose
from amdtop.logread.rccl.parser import LogParser, parse_files, parse_lines
from amdtop.logread.rccl.report import report_json
from amdtop.model import FlagKind
from amdtop.telemetry.sim import SimBackend
from tests.fixtures.rccl.make_logs import MI300X_BUS, interleave, proc_comm_lines, startup_warns

BUS8 = MI300X_BUS


def _job(n: int = 8, **kw: object) -> list[str]:
    procs = [proc_comm_lines(r, BUS8[:n], pid=7000 + r, **kw) for r in range(n)]  # type: ignore[arg-type]
    return [line for r in range(n) for line in startup_warns("n1", 7000 + r, r)] + interleave(procs)


def test_eight_processes_no_commid_are_one_communicator() -> None:
    rep = parse_lines(_job(8))
    (comm,) = rep.comms
    assert (comm.id, comm.nranks, comm.processes, comm.joined_by) == ("comm-1", 8, 8, "structure")
    assert [(r.rank, r.dev, r.bus_id, r.host, r.pid) for r in comm.ranks] == [
        (r, r, BUS8[r], "n1", 7000 + r) for r in range(8)
    ]
    assert len({r.ptr for r in comm.ranks}) == 8  # eight per-process pointers, one communicator
    assert [(e.src, e.dst, e.transport, e.channels) for e in comm.edges] == [
        (r, (r + 1) % 8, "P2P/IPC", 2) for r in range(8)
    ]
    assert comm.init_complete == 8 and comm.rings_connected == 8
    assert comm.summary == "8 ranks, all pairs P2P/IPC"
    assert rep.unknown_lines == 0 and rep.errors == () and rep.notes == ()


def test_startup_warnings_grouped_with_rank_and_process_counts() -> None:
    rep = parse_lines(_job(8))
    assert len(rep.warnings) == 24
    groups = [(g.text.split(" from ")[0], g.count, g.ranks, g.processes) for g in rep.warning_groups]
    assert groups == [
        ('Missing "amd_iommu=on"', 8, tuple(range(8)), 8),
        ('Missing "iommu=pt"', 8, tuple(range(8)), 8),
        ('Missing "HSA_FORCE_FINE_GRAIN_PCIE=1"', 8, tuple(range(8)), 8),
    ]
    doc = report_json(rep)
    assert len(doc["warnings"]) == 24 and [g["count"] for g in doc["warning_groups"]] == [8, 8, 8]
    assert doc["warning_groups"][0]["source"] == "src/init.cpp:120"


def test_one_file_per_process_joins_the_same(tmp_path: Path) -> None:
    paths = []
    for r in range(4):
        p = tmp_path / f"rank{r}.log"
        p.write_text("\n".join(line for ph in proc_comm_lines(r, BUS8[:4], pid=7000 + r) for line in ph) + "\n")
        paths.append(p)
    (comm,) = parse_files(paths).comms
    assert comm.nranks == 4 and [r.pid for r in comm.ranks] == [7000, 7001, 7002, 7003]


def test_two_communicators_of_one_size_per_process_are_told_apart_by_init_order() -> None:
    # vLLM builds more than one communicator over the same TP ranks: the n-th init of each process belongs together
    first = [proc_comm_lines(r, BUS8[:4], pid=7000 + r, ptr=f"0xa{r}") for r in range(4)]
    second = [proc_comm_lines(r, BUS8[:4], pid=7000 + r, ptr=f"0xb{r}", transport="P2P/IPC/read") for r in range(4)]
    rep = parse_lines(interleave(first) + interleave(second))
    assert [(c.id, c.nranks, c.processes) for c in rep.comms] == [("comm-1", 4, 4), ("comm-2", 4, 4)]
    assert [{e.transport for e in c.edges} for c in rep.comms] == [{"P2P/IPC"}, {"P2P/IPC/read"}]
    assert [r.ptr for r in rep.comms[1].ranks] == ["0xb0", "0xb1", "0xb2", "0xb3"]


def test_two_tp_groups_of_two_are_split_by_bus_ids() -> None:
    # TP=2 x PP=2: two 2-rank communicators whose processes both hold ranks 0 and 1; lines arrive A, D, C, B
    a = proc_comm_lines(0, ("5000", "26000"), pid=7000)
    b = proc_comm_lines(1, ("5000", "26000"), pid=7001)
    c = proc_comm_lines(0, ("46000", "65000"), pid=7002, dev=2)
    d = proc_comm_lines(1, ("46000", "65000"), pid=7003, dev=3)
    rep = parse_lines(interleave([a, d, c, b]))
    got = sorted((tuple(r.pid for r in cm.ranks), tuple(r.bus_id for r in cm.ranks)) for cm in rep.comms)
    assert got == [((7000, 7001), ("5000", "26000")), ((7002, 7003), ("46000", "65000"))]


def test_two_hosts_net_between_them_is_inter_node_not_a_fallback() -> None:
    hosts = ("n1", "n1", "n2", "n2")
    procs = [proc_comm_lines(r, BUS8[:4], host=hosts[r], pid=7000 + r, dev=r % 2, peer_host=hosts) for r in range(4)]
    rep = parse_lines(interleave(procs))
    (comm,) = rep.comms
    assert comm.hosts == ("n1", "n2") and [r.host for r in comm.ranks] == list(hosts)
    assert [(e.src, e.dst, e.transport, e.inter_node) for e in comm.edges] == [
        (0, 1, "P2P/IPC", False),
        (1, 2, "NET/IB/0", True),
        (2, 3, "P2P/IPC", False),
        (3, 0, "NET/IB/0", True),
    ]
    assert comm.summary == "4 ranks on 2 nodes (n1, n2), 2 pairs P2P/IPC, 2 pairs NET/IB/0 inter-node"
    assert diagnose(rep, SimBackend().topology(), "tp4") == []


def test_benign_traces_then_connected_rings_are_notes_not_errors() -> None:
    rep = parse_lines(_job(8, benign_trace=True))
    assert rep.errors == ()
    assert len(rep.notes) == 8 and {m.kind for m in rep.notes} == {"trace_note"}
    assert rep.notes[0].text == "src/transport/net_ib.cc:652 -> 2 (unhandled system error)"
    assert dict(rep.notes[0].extra)["verdict"].startswith("nothing failed")
    flags = diagnose(rep, SimBackend().topology(), "tp8")
    assert [f for f in flags if f.kind in (FlagKind.NCCL_ERROR, FlagKind.NCCL_TIMEOUT)] == []
    assert report_json(rep)["notes"][0]["verdict"].startswith("nothing failed")


def _failing(fail: str) -> LogParser:
    procs = [proc_comm_lines(r, BUS8[:4], pid=7000 + r, fail=fail if r == 2 else None) for r in range(4)]
    p = LogParser()
    p.feed_lines(interleave(procs))
    return p


def test_a_rank_that_warns_and_never_completes_is_an_error_on_its_gpu() -> None:
    rep = _failing("warn").report()
    (comm,) = rep.comms
    assert comm.init_complete == 3 and comm.summary.endswith("(init complete on 3/4)")
    (err,) = rep.errors
    assert (err.kind, err.rank, err.pid) == ("error_trail", 2, 7002)
    assert dict(err.extra)["trail"] == ("src/transport/p2p.cc:473", "src/group.cc:68")
    assert dict(err.extra)["verdict"] == "a WARN on the same thread"
    (flag,) = diagnose(rep, SimBackend().topology(), "tp4")
    assert (flag.kind, flag.worker, flag.gpus) == (FlagKind.NCCL_ERROR, "tp4", (2,))


def test_a_silent_trace_is_an_error_when_its_rank_never_completes_while_others_do() -> None:
    (err,) = _failing("silent").report().errors
    assert dict(err.extra)["verdict"] == "its communicator never completed init while other ranks did"


def test_abort_complete_makes_the_trace_an_error() -> None:
    rep = _failing("abort").report()
    assert rep.comms[0].ended == "aborted"
    (err,) = rep.errors
    assert dict(err.extra)["verdict"] == "its communicator was aborted"


def test_with_commid_the_id_joins() -> None:
    procs = [proc_comm_lines(r, BUS8[:4], pid=7000 + r, comm_id="0x1234abcd") for r in range(4)]
    (comm,) = parse_lines(interleave(procs)).comms
    assert (comm.id, comm.joined_by, comm.processes, comm.nranks) == ("0x1234abcd", "commId", 4, 4)


def test_cli_text_groups_warnings_and_lists_pairs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "job.log"
    f.write_text("\n".join(_job(8, benign_trace=True)) + "\n")
    assert main(["logs", "parse", str(f)]) == 0
    out = capsys.readouterr().out
    assert "comm-1: 8 ranks, all pairs P2P/IPC" in out
    assert "  pairs: P2P/IPC 0->1 1->2 2->3 3->4 4->5 5->6 6->7 7->0" in out
    assert "warnings (24 lines, 3 distinct):" in out
    assert '  x8 (8 ranks, 8 processes on n1) Missing "amd_iommu=on"' in out
    assert "notes (8, return-code traces after which nothing failed):" in out
    assert "errors" not in out and "! nccl_error" not in out


def test_one_process_driving_four_gpus_is_one_communicator() -> None:
    # ncclCommInitAll / nccl-tests -g 4: one pid, one pointer per GPU; every Init START comes before any COMPLETE
    bus = BUS8[:4]
    lines = [
        f"n1:500:{600 + r} [{r}] NCCL INFO ncclCommInitAll comm 0xa{r} rank {r} nranks 4 cudaDev {r} busId {bus[r]}"
        " - Init START"
        for r in range(4)
    ]
    lines += [
        f"n1:500:{600 + r} [{r}] NCCL INFO Channel 00/0 : {r}[{bus[r]}] -> {(r + 1) % 4}[{bus[(r + 1) % 4]}] via "
        f"P2P/IPC comm 0xa{r} nRanks 04"
        for r in range(4)
    ]
    lines += [
        f"n1:500:{600 + r} [{r}] NCCL INFO comm 0xa{r} rank {r} nranks 4 cudaDev {r} busId {bus[r]} - Init COMPLETE"
        for r in range(4)
    ]
    (comm,) = parse_lines(lines).comms
    assert (comm.nranks, comm.processes, comm.init_complete, len(comm.edges)) == (4, 1, 4, 4)
    assert [r.dev for r in comm.ranks] == [0, 1, 2, 3]
