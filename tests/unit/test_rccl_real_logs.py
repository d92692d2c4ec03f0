"""Excerpts of real RCCL/NCCL logs from public issue trackers (tests/fixtures/rccl/real/, the source URL on each file's
first line), and what a reader of each log concludes."""

from __future__ import annotations

from pathlib import Path

from amdtop.logread.rccl.diagnose import diagnose
from amdtop.logread.rccl.parser import parse_files
from amdtop.model import FlagKind

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "rccl" / "real"


def test_every_excerpt_names_its_source() -> None:
    files = sorted(REAL.glob("*.log"))
    assert len(files) == 18
    for f in files:
        assert f.read_text().splitlines()[0].startswith("# source: https://github.com/"), f


def test_rccl_1026_two_nodes_four_processes_each_one_communicator() -> None:
    # ROCm/rccl#1026: RCCL 2.16.5, 2 nodes x 4 MI250X GCDs, one process per GCD, no commId, per-process pointers
    rep = parse_files(sorted(REAL.glob("rocm-rccl-1026-*.log")))
    assert rep.unknown_lines == 0
    (comm,) = rep.comms
    assert (comm.nranks, comm.hosts, comm.processes, comm.joined_by) == (8, ("g1064", "g1072"), 8, "structure")
    assert [(r.rank, r.host, r.pid, r.bus_id) for r in comm.ranks] == [
        (0, "g1064", 11143, "c1000"),
        (1, "g1064", 11144, "c6000"),
        (2, "g1064", 11145, "c9000"),
        (3, "g1064", 11146, "ce000"),
        (4, "g1072", 1263985, "c1000"),
        (5, "g1072", 1263986, "c6000"),
        (6, "g1072", 1263987, "c9000"),
        (7, "g1072", 1263988, "ce000"),
    ]
    assert [r.dev for r in comm.ranks] == [0, 1, 2, 3, 0, 1, 2, 3]
    # GCDs of one node talk P2P/IPC; the two NET/Socket pairs cross the nodes: expected, not a fallback
    assert [(e.src, e.dst, e.transport, e.inter_node) for e in comm.edges] == [
        (1, 4, "NET/Socket/1", True),
        (2, 0, "P2P/IPC", False),
        (2, 3, "P2P/IPC", False),
        (3, 6, "NET/Socket/2", True),
        (7, 5, "P2P/IPC", False),
    ]
    assert comm.rings_connected == 4
    assert comm.init_complete == 0  # the excerpt ends before any Init COMPLETE
    assert {e.name: e.value for e in rep.env} == {"NCCL_P2P_LEVEL": "XGMI"}
    # 7 startup WARN lines, three messages, each from two or three processes on both nodes
    assert len(rep.warnings) == 7
    assert [(g.text.split(" from ")[0], g.count, g.processes, g.hosts) for g in rep.warning_groups] == [
        ('Missing "HSA_FORCE_FINE_GRAIN_PCIE=1"', 3, 3, ("g1064", "g1072")),
        ('Missing "amd_iommu=on"', 2, 2, ("g1064", "g1072")),
        ('Missing "iommu=pt"', 2, 2, ("g1064", "g1072")),
    ]
    assert rep.warning_groups[0].ranks == (0, 4, 7)
    # the excerpts stop before any Init COMPLETE: as a finished set of files, an init that never completed
    assert rep.errors == ()
    (flag,) = diagnose(rep, None, "job")
    assert flag.kind is FlagKind.NCCL_INIT_INCOMPLETE
    assert dict(flag.extra)["last_phase"] == "connecting" and dict(flag.extra)["missing_ranks"] == ()


def test_rccl_1454_failed_init_is_an_error_on_both_threads() -> None:
    # ROCm/rccl#1454: a proxy socket WARN, an async trace (-> 3), the caller's trace (-> 1), rccl-tests gives up
    rep = parse_files([REAL / "rocm-rccl-1454-failure.log"])
    kinds = [(e.kind, dict(e.extra).get("result")) for e in rep.errors]
    assert kinds == [("error_trail", 3), ("error_trail", 1), ("exception", None)]
    first, second = rep.errors[0], rep.errors[1]
    assert dict(first.extra)["verdict"] == "a WARN on the same thread"
    assert dict(first.extra)["trail"][-1] == "src/group.cc:68"
    assert dict(second.extra)["verdict"] == "follows a failed trace of the same process"
    assert rep.notes == ()
    assert {f.kind for f in diagnose(rep, None)} == {FlagKind.NCCL_ERROR}


def test_nccl_tests_166_connection_failures_are_errors() -> None:
    # NVIDIA/nccl-tests#166: socket connect aborted, proxy service fails, remote peer closes: three failing traces
    rep = parse_files([REAL / "nvidia-nccl-tests-166-failure.log"])
    assert [dict(e.extra)["result"] for e in rep.errors] == [2, 6, 3]
    assert all(dict(e.extra)["verdict"] == "a WARN on the same thread" for e in rep.errors)
    assert [w.text.split(":")[0] for w in rep.warnings] == [
        "socketStartConnect",
        "[Proxy Service 0] Failed to execute operation Connect from rank 0, retcode 2",
        "socketProgress",
        "Socket recv failed while polling for opId=0x7f6f18cb7f40",
    ]
    assert rep.unknown_lines == 0


def test_nccl_1412_one_process_eight_gpus_joined_by_commid() -> None:
    # NVIDIA/nccl#1412: one process drives the GPUs of one node of a 16-rank job; NCCL prints the commId
    rep = parse_files([REAL / "nvidia-nccl-1412-one-process-commid.log"])
    (comm,) = rep.comms
    assert (comm.id, comm.nranks, comm.joined_by, comm.processes, comm.hosts) == (
        "0x49bbd7790311d5eb",
        16,
        "commId",
        1,
        ("swat1-04",),
    )
    assert [(r.rank, r.dev, r.bus_id, r.init_complete) for r in comm.ranks] == [
        (0, 0, "7000", True),
        (1, 1, "b000", True),
        (4, 4, "88000", True),
        (5, 5, "8b000", True),
        (6, 6, "c8000", True),
    ]
    assert [r.init_s for r in comm.ranks] == [1.08, None, None, None, 1.08]
    assert len({r.ptr for r in comm.ranks}) == 5 and rep.unknown_lines == 0
