"""Issue 27, RCCL/NCCL failure truth: fatal WARNs and ``[FATAL ERROR]`` lines are errors with their ranks, an init
that never completes is flagged with each rank's phase, hosts' NIC lists are compared, transport names are kept whole,
bus ids come from every bracket that holds one, one rank rule for warnings and groups.

Real excerpts live in tests/fixtures/rccl/real/ (source URL on line 1); tests/fixtures/rccl/built/ holds the cases no
public capture shows whole (labelled ``# built`` on line 1).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from amdtop.cli.main import main
from amdtop.logread.rccl.diagnose import diagnose
from amdtop.logread.rccl.parser import parse_files, parse_lines
from amdtop.logread.rccl.report import report_json
from amdtop.model import FlagKind

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "rccl"
REAL, BUILT = FIX / "real", FIX / "built"


def test_built_fixtures_say_so() -> None:
    files = sorted(BUILT.glob("*.log"))
    assert len(files) == 4
    for f in files:
        assert f.read_text().splitlines()[0].startswith(("# built (", "# built, no public capture found: ")), f


# -- fatal WARNs and [FATAL ERROR] lines ----------------------------------------------------------------------------
def test_ipc_warn_without_trail_is_an_error_of_its_rank_and_process() -> None:
    # rccl-tests#120: one line, no return-code trail after it
    rep = parse_files([REAL / "rocm-rccl-tests-120-ipc-warn.log"])
    (err,) = rep.errors
    assert (err.kind, err.host, err.pid, err.dev) == ("fatal_warn", "guest", 5161, 1)
    assert dict(err.extra)["source"] == "src/transport/p2p.cc:239"
    (flag,) = diagnose(rep, None, "w")
    assert flag.kind is FlagKind.NCCL_ERROR and "hipIpcGetMemHandle failed : invalid argument" in flag.message


def test_every_rank_printing_the_ipc_warn_is_one_flag_naming_them_all() -> None:
    rep = parse_files([BUILT / "ipc-warn-no-trail.log"])
    assert rep.unknown_lines == 0
    fatal = [e for e in rep.errors if e.kind == "fatal_warn"]
    assert [(e.rank, e.pid) for e in fatal] == [(0, 4101), (1, 4101), (2, 4103), (3, 4104)]
    (abort,) = [e for e in rep.errors if e.kind == "fatal_error"]
    assert (abort.text, abort.rank, abort.pid) == ("[FATAL ERROR]: HIP failure: 'invalid argument'", 2, 4103)
    flags = diagnose(rep, None, "tp4")
    assert [f.kind for f in flags] == [FlagKind.NCCL_ERROR, FlagKind.NCCL_ERROR]  # the failure explains the init
    first = dict(flags[0].extra)
    assert first["ranks"] == (0, 1, 2, 3) and first["processes"] == ("n1:4101", "n1:4103", "n1:4104")
    assert "on ranks 0,1,2,3 (4 lines, 3 processes)" in flags[0].message
    assert dict(flags[1].extra)["rank"] == 2


def test_node_header_fatal_error_line_is_an_error_not_unknown() -> None:
    # the form issue 27 quotes from ROCm/rccl#2188 (host and pid redacted to "node"): host node, device 1; no line
    # names the rank of that process, and [1] is its device, not its rank (issue 35)
    rep = parse_lines(["node [1] [FATAL ERROR]: HIP failure: 'invalid argument'"])
    (err,) = rep.errors
    assert rep.unknown_lines == 0 and (err.kind, err.host, err.dev, err.rank) == ("fatal_error", "node", 1, None)


def test_reverse_path_warn_folds_into_its_failed_trace() -> None:
    # ROCm/rccl#1728: the WARN, then the trail of the same thread: one error carrying the WARN's text
    rep = parse_files([REAL / "rocm-rccl-1728-reverse-path.log"])
    kinds = [e.kind for e in rep.errors]
    assert "fatal_warn" not in kinds and kinds.count("error_trail") == 2
    assert dict(rep.errors[0].extra)["warn"].startswith("Failed to find reverse path from remNode 0/200000")


def test_proxy_service_failure_warn_after_its_trail_is_folded_too() -> None:
    rep = parse_files([REAL / "nvidia-nccl-795-proxy-failure.log"])
    (err,) = rep.errors
    assert err.kind == "error_trail" and dict(err.extra)["result"] == 6
    assert dict(err.extra)["warn"].startswith("[Proxy Service 9] Failed to execute operation Connect")


def test_abort_complete_alone_is_an_error() -> None:
    line = "n1:7000:7061 [0] NCCL INFO comm 0x56 rank 0 nranks 2 cudaDev 0 busId 5000 - Abort COMPLETE"
    (err,) = parse_lines([line]).errors
    assert (err.kind, err.rank, err.pid) == ("comm_aborted", 0, 7000)


# -- one rank rule ---------------------------------------------------------------------------------------------------
def test_a_process_with_two_ranks_attributes_each_warn_to_its_device_rank() -> None:
    rep = parse_files([BUILT / "ipc-warn-no-trail.log"])
    assert [(w.pid, w.dev, w.rank) for w in rep.warnings] == [(4101, 0, 0), (4101, 1, 1), (4103, 2, 2), (4104, 3, 3)]
    (group,) = rep.warning_groups
    assert group.ranks == (0, 1, 2, 3) and group.processes == 3
    doc = report_json(rep)
    assert [w["rank"] for w in doc["warnings"]] == [0, 1, 2, 3] and doc["warning_groups"][0]["ranks"] == [0, 1, 2, 3]


def test_startup_warns_before_init_take_the_rank_the_process_holds() -> None:
    rep = parse_files([BUILT / "hang-after-trees-iommu.log"])
    iommu = next(g for g in rep.warning_groups if g.text.startswith('Missing "iommu=pt"'))
    assert iommu.ranks == (0, 1, 2, 3) and iommu.processes == 4
    assert {w.rank for w in rep.warnings if w.pid == 7002} == {2}


# -- an init that never completes -------------------------------------------------------------------------------------
def test_log_that_stops_after_trees_is_init_incomplete_with_phases_and_missing_ranks() -> None:
    # NVIDIA/nccl#634 "NCCL hangs in initialization": old NCCL, Trees lines without a comm suffix, then nothing
    rep = parse_files([REAL / "nvidia-nccl-634-trees-hang.log"])
    (comm,) = rep.comms
    assert comm.stuck_ranks == (5, 6, 8, 10, 11) and comm.last_phase == "trees"
    assert comm.missing == (0, 1, 2, 3, 4, 7, 9)
    (flag,) = diagnose(rep, None, "job")
    assert flag.kind is FlagKind.NCCL_INIT_INCOMPLETE
    assert "0/12 ranks complete; ranks 5-6,8,10-11 at trees; ranks 0-4,7,9 printed nothing" in flag.message


def test_hang_after_trees_names_the_iommu_warn_as_likely_cause() -> None:
    rep = parse_files([BUILT / "hang-after-trees-iommu.log"])
    (flag,) = diagnose(rep, None, "tp4")
    extra = dict(flag.extra)
    assert flag.kind is FlagKind.NCCL_INIT_INCOMPLETE
    assert extra["stuck_ranks"] == (2, 3) and extra["complete"] == 2 and extra["nranks"] == 4
    assert extra["phases"] == ((0, "complete"), (1, "complete"), (2, "trees"), (3, "trees"))
    assert any(c.startswith('Missing "iommu=pt"') for c in extra["likely_causes"])
    init = report_json(rep)["comms"][0]["init"]
    assert init == {
        "complete": 2,
        "nranks": 4,
        "last_phase": "trees",
        "phases": {"0": "complete", "1": "complete", "2": "trees", "3": "trees"},
        "missing": [],
    }


def test_ranks_whose_files_are_absent_alone_raise_no_flag() -> None:
    # NVIDIA/nccl#1412: 5 of 16 ranks print Init COMPLETE, the others' lines are not in the excerpt
    rep = parse_files([REAL / "nvidia-nccl-1412-one-process-commid.log"])
    (comm,) = rep.comms
    assert comm.missing and not comm.stuck_ranks and diagnose(rep, None, "job") == []


def test_a_complete_init_is_not_flagged() -> None:
    rep = parse_files([BUILT / "hang-after-trees-iommu.log"])
    lines = [
        x
        for x in (BUILT / "hang-after-trees-iommu.log").read_text().splitlines()
        if "7002" not in x and "7003" not in x
    ]
    done = parse_lines(lines)
    assert rep.comms[0].init_incomplete and not done.comms[0].init_incomplete
    assert [f for f in diagnose(done, None, "tp4") if f.kind is FlagKind.NCCL_INIT_INCOMPLETE] == []


# -- NICs ------------------------------------------------------------------------------------------------------------
def test_net_ib_lists_per_host() -> None:
    rep = parse_files([REAL / "rocm-rccl-419-net-ib.log"])
    assert report_json(rep)["nics"] == {"e05r3n09": ["mlx5_3", "mlx5_2", "mlx5_1", "mlx5_0"]}
    assert rep.nics[0].network == "IB" and rep.unknown_lines == 0


def test_ib_plugin_network_and_launcher_prefix() -> None:
    # NVIDIA/nccl#1029: "Using network IBext" (the SHARP plugin) lists its devices as NET/IB; pdsh prefixes the host
    rep = parse_files([REAL / "nvidia-nccl-1029-ibext-sharp.log"])
    assert report_json(rep)["nics"] == {"rdma-gpu-train-worker-0": ["mlx5_9"]}
    assert rep.nics[0].network == "IBext" and rep.unknown_lines == 0


def test_two_hosts_with_the_same_nic_agree() -> None:
    rep = parse_files([REAL / "nvidia-nccl-tests-133-two-hosts-roce.log"])
    assert report_json(rep)["nics"] == {"nodea": ["mlx5_6"], "nodeb": ["mlx5_6"]}
    assert diagnose(rep, None, None) == []


def test_ofi_plugin_nic_lines_and_net_socket_of_a_node_header() -> None:
    rep = parse_files([REAL / "nvidia-nccl-1597-ofi-nics.log"])
    assert report_json(rep)["nics"]["8h200-3"][:2] == ["0000:56:00.0", "0000:55:00.0"]
    node = parse_files([REAL / "rocm-rccl-2188-startup.log"])
    assert node.unknown_lines == 0 and node.library == "RCCL" and node.version == "2.27.7"
    (warn,) = node.warnings
    assert (warn.host, warn.dev, warn.text.split(" from")[0]) == ("node", 0, 'Missing "iommu=pt"')
    assert report_json(node)["nic_lists"]["node"]["listed"] == {"NET/IB": []}


def test_hosts_of_one_job_with_different_nics_are_flagged() -> None:
    rep = parse_files([BUILT / "nic-mismatch-8-vs-7.log"])
    (flag,) = diagnose(rep, None, "job")
    assert flag.kind is FlagKind.NIC_MISMATCH
    assert dict(flag.extra)["missing"] == (("gpu-b", ("mlx5_7",)),)
    assert "gpu-a 8, gpu-b 7" in flag.message and "gpu-b lacks mlx5_7" in flag.message


# -- transports, bus ids, nodes ----------------------------------------------------------------------------------------
def test_plugin_transport_name_with_a_space_is_kept_whole() -> None:
    rep = parse_files([REAL / "aws-ofi-nccl-715-libfabric.log"])
    assert dict(rep.transports)["NET/AWS Libfabric/1/GDRDMA/Shared"] == 2
    assert "NET/AWS" not in dict(rep.transports)


def test_receive_line_gives_the_remote_rank_its_bus_id() -> None:
    # NVIDIA/nccl#429: old NCCL, no comm suffix; 6[b1000] is the remote (sending) rank of a [receive] line
    (comm,) = parse_files([REAL / "nvidia-nccl-429-receive.log"]).comms
    bus = {r.rank: r.bus_id for r in comm.ranks}
    assert bus[6] == "b1000" and bus[14] == "b1000" and bus[12] == "88000"


def test_nnodes_and_inter_node_are_filled_from_the_hosts() -> None:
    rep = parse_files(sorted(REAL.glob("rocm-rccl-1026-*.log")))
    (comm,) = rep.comms
    assert comm.nnodes == 2 and all(e.inter_node is not None for e in comm.edges)
    assert report_json(rep)["comms"][0]["nnodes"] == 2


# -- the CLI -----------------------------------------------------------------------------------------------------------
def test_logs_parse_json_carries_init_nics_and_the_new_flag_kinds(capsys: pytest.CaptureFixture[str]) -> None:
    files = [str(BUILT / "hang-after-trees-iommu.log"), str(BUILT / "nic-mismatch-8-vs-7.log")]
    assert main(["logs", "parse", *files, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["comms"][0]["init"]["last_phase"] == "trees"
    assert set(doc["nics"]) == {"gpu-a", "gpu-b"}
    assert {f["kind"] for f in doc["flags"]} == {"nccl_init_incomplete", "nic_mismatch"}
    assert main(["logs", "parse", *files]) == 0
    text = capsys.readouterr().out
    assert "! nccl_init_incomplete: comm-1: init never completed" in text and "! nic_mismatch:" in text


def test_the_tail_marks_fatal_lines_as_errors() -> None:
    from amdtop.logread.rccl.lines import ERROR, INFO, classify

    assert classify("node [1] [FATAL ERROR]: HIP failure: 'invalid argument'") == ERROR
    assert classify("h:1:2 [0] NCCL INFO /x/src/group.cc:68 -> 3 [Async thread]") == ERROR
    assert classify("h:1:2 [0] NCCL INFO Channel 00/0 : 0[5000] -> 1[26000] via P2P/IPC comm 0x5 nRanks 08") == INFO


def test_abort_after_a_completed_init_is_a_teardown_not_an_error() -> None:
    head = "n1:7000:7061 [0] NCCL INFO"
    done = f"{head} comm 0x56 rank 0 nranks 2 cudaDev 0 busId 5000 used 67129296 bytes - Init COMPLETE"
    abort = f"{head} comm 0x56 rank 0 nranks 2 cudaDev 0 busId 5000 - Abort COMPLETE"
    rep = parse_lines([done, abort])
    assert rep.errors == () and rep.comms[0].ended == "aborted"


def test_reports_between_feeds_reuse_unchanged_communicators_and_equal_one_parse() -> None:
    # a live tail reports after every poll: finished communicators are reused, changed ones frozen again
    from amdtop.logread.rccl.parser import LogParser
    from tests.fixtures.rccl.make_logs import MI300X_BUS, interleave, proc_comm_lines

    lines: list[str] = []
    for c in range(3):
        procs = [proc_comm_lines(r, MI300X_BUS[:4], pid=7000 + r, ptr=f"0x{c + 1:x}{r:04x}") for r in range(4)]
        lines += interleave(procs)
    p = LogParser()
    seen = []
    for k in range(0, len(lines), 7):
        p.feed_lines(lines[k : k + 7], "live", k + 1)
        seen.append(p.report())
    whole = parse_lines(lines, "live")
    assert seen[-1].comms == whole.comms and len(whole.comms) == 3
    assert seen[-1].comms[0] is seen[-2].comms[0]  # the first communicator, long finished, was not frozen again


def test_initializing_nic_lines_list_a_hosts_nics() -> None:
    # the fixture is built (no public capture of the line was found): see its first line
    path = BUILT / "initializing-nic-4-vs-3.log"
    assert path.read_text().startswith("# built, no public capture found: format from ")
    rep = parse_files([path])
    assert rep.unknown_lines == 0
    lists = report_json(rep)["nic_lists"]
    assert lists["gpu-a"]["listed"] == {"NIC": ["ionic_0", "ionic_1"], "NET/IB": ["ionic_2", "ionic_3"]}
    # "Using network IB" picks the NET/IB list where the plugin's lines name it
    assert report_json(rep)["nics"] == {"gpu-a": ["ionic_2", "ionic_3"], "gpu-b": ["ionic_2"]}
    (flag,) = diagnose(rep, None, "job")
    assert flag.kind is FlagKind.NIC_MISMATCH and "gpu-b lacks ionic_3" in flag.message


@pytest.mark.parametrize(
    ("msg", "source", "device"),
    [
        ("Initializing NIC 0 mlx5_0", "NIC", "mlx5_0"),
        ("Initializing NIC mlx5_1", "NIC", "mlx5_1"),
        ("Initializing NIC #2: ionic_2", "NIC", "ionic_2"),
        ("Initializing NIC 0000:56:00.0", "NIC", "0000:56:00.0"),
        ("NET/IB : Initializing NIC 3 mlx5_3", "NET/IB", "mlx5_3"),
        ("NET/AWS Libfabric : Initializing NIC 1 rdmap16s27", "NET/AWS Libfabric", "rdmap16s27"),
    ],
)
def test_initializing_nic_forms(msg: str, source: str, device: str) -> None:
    rep = parse_lines([f"h1:1:1 [0] NCCL INFO {msg}"])
    assert rep.unknown_lines == 0 and [(h.host, h.listed) for h in rep.nics] == [("h1", ((source, (device,)),))]
