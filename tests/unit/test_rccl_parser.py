"""Parser over RCCL- and NCCL-dialect logs built from the amd.md grammar, and the amd.md example block."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from amdtop.errors import InputError
from amdtop.logread.rccl.parser import LogParser, parse_files, parse_lines
from amdtop.logread.rccl.report import report_json
from tests.fixtures.rccl.make_logs import MI300X_BUS, nccl_rank_lines, rccl_rank_lines

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "rccl"


def _parse_ranks(make, nranks: int, **kw) -> LogParser:  # type: ignore[no-untyped-def]
    p = LogParser()
    for r in range(nranks):
        p.feed_lines(make(r, nranks, **kw), f"rank{r}.log")
    return p


def test_rccl_four_ranks_p2p() -> None:
    rep = _parse_ranks(rccl_rank_lines, 4, nchannels=4).report()
    assert (rep.library, rep.version, rep.files, rep.unknown_lines) == ("RCCL", "2.22.3", 4, 0)
    (comm,) = rep.comms
    assert comm.id == "0x551d06754c6bacf2"
    assert comm.nranks == 4 and comm.nnodes == 1
    assert [(r.rank, r.dev, r.bus_id, r.host, r.pid) for r in comm.ranks] == [
        (r, r, MI300X_BUS[r], "n1", 4100 + r) for r in range(4)
    ]
    assert [(e.src, e.dst, e.transport, e.channels) for e in comm.edges] == [
        (0, 1, "P2P/IPC", 4),
        (1, 2, "P2P/IPC", 4),
        (2, 3, "P2P/IPC", 4),
        (3, 0, "P2P/IPC", 4),
    ]
    assert dict(rep.transports) == {"P2P/IPC": 16}
    assert comm.summary == "4 ranks, all pairs P2P/IPC"
    assert comm.rings_connected == 4 and comm.trees_connected == 4 and comm.coll_channels == 4
    assert all(r.init_complete for r in comm.ranks)
    assert {(e.name, e.value, e.known) for e in rep.env} == {
        ("NCCL_P2P_LEVEL", "XGMI", True),
        ("NCCL_NTHREADS", "256", True),
    }
    assert rep.versions == (("HIP", "6.4.43482-0f2d60242"), ("ROCm", "6.4.0.0-47-73dae9c"))
    # WARN: message after "NCCL WARN", build path cut to src/...
    w = rep.warnings[0]
    assert w.text.startswith('Missing "iommu=pt"') and dict(w.extra)["source"] == "src/init.cc:179"
    assert rep.errors == ()


@pytest.mark.parametrize(
    "launcher", ["(VllmWorkerProcess pid=4101) ", "(RayWorkerWrapper pid=593, ip=10.0.0.5) ", "[0] ", "> "]
)
def test_launcher_prefixes_are_stripped(launcher: str) -> None:
    plain = report_json(_parse_ranks(rccl_rank_lines, 2).report())
    prefixed = report_json(_parse_ranks(rccl_rank_lines, 2, launcher=launcher).report())
    assert prefixed["comms"] == plain["comms"]
    assert prefixed["transports"] == plain["transports"]


def test_nccl_dialect_cudadev_brackets_and_timings() -> None:
    p = LogParser()
    for r in range(4):
        p.feed_lines(nccl_rank_lines(r, 4, transport="SHM/direct/direct" if r == 2 else "P2P/CUMEM"), f"r{r}")
    rep = p.report()
    assert (rep.library, rep.version) == ("NCCL", "2.21.5")
    assert dict(rep.versions)["vllm-nccl"] == "2.21.5"
    (comm,) = rep.comms
    assert comm.id == "0x441adb6684024f5e"
    # rank[N] is the cudaDev in NCCL >= 2.19: bus ids come from the Init lines, not the brackets
    assert [r.bus_id for r in comm.ranks] == ["18000", "2a000", "3a000", "5d000"]
    assert [r.init_s for r in comm.ranks] == [0.53] * 4
    assert comm.rings_connected == 4
    assert comm.summary == "4 ranks, 3 pairs P2P/CUMEM, 1 pair SHM/direct/direct"
    assert dict(rep.transports) == {"P2P/CUMEM": 6, "SHM/direct/direct": 2}
    assert rep.unknown_lines == 0


def test_amd_md_example_block() -> None:
    rep = parse_files([FIXTURES / "amd_examples.log"])
    assert (rep.library, rep.version, rep.unknown_lines) == ("RCCL", "2.22.3", 0)
    assert set(dict(rep.transports)) == {
        "P2P/IPC",
        "P2P/direct pointer",
        "P2P/CUMEM",
        "SHM/direct/direct",
        "NET/IB/0/GDRDMA",
        "NET/Socket/1",
    }
    kinds = [e.kind for e in rep.errors]
    assert kinds == ["error_trail", "nccl_error", "watchdog_timeout", "exception"]
    trail = dict(rep.errors[0].extra)
    assert trail["result"] == 3 and trail["trail"] == ("src/transport/p2p.cc:473", "src/group.cc:68")
    wd = rep.errors[2]
    assert wd.rank == 1 and dict(wd.extra) == {"seq": 808, "op": "ALLREDUCE", "timeout_ms": 600000, "ran_ms": 600020}
    stamped = [w for w in rep.warnings if dict(w.extra).get("time")]
    assert len(stamped) == 1 and stamped[0].text == "hipIpcGetMemHandle failed : invalid argument"
    assert dict(stamped[0].extra)["source"] == "src/transport/p2p.cc:256" and stamped[0].rank == 2
    assert len(rep.warnings) == 4
    main = rep.comms[0]
    assert main.id == "0x551d06754c6bacf2" and main.nranks == 8 and main.coll_channels == 8


def test_old_formats_without_commid() -> None:
    lines = [
        "n1:10:10 [0] NCCL INFO NCCL version 2.18.1+cuda12.1",
        *(
            f"n1:1{r}:2{r} [{r}] NCCL INFO comm 0xa{r} rank {r} nranks 2 cudaDev {r} busId {b} used 67129296 bytes - Init COMPLETE"
            for r, b in ((0, "63000"), (1, "64000"))
        ),
        "n1:10:20 [0] NCCL INFO Channel 00 : 0[63000] -> 1[64000] via P2P/IPC",
        "n1:10:20 [0] NCCL INFO comm 0xa0 rank 0 nranks 2 cudaDev 0 busId 63000 - Destroy COMPLETE",
        "[E ProcessGroupNCCL.cpp:458] [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=5, "
        "OpType=BROADCAST, Timeout(ms)=1800000) ran for 1800456 milliseconds before timing out.",
        "n1:10:20 [0] misc/ibvwrap.cu:61 WARN Failed to open libibverbs.so[.1]",
    ]
    rep = parse_lines(lines)
    assert (rep.library, rep.version) == ("NCCL", "2.18.1")
    (comm,) = rep.comms
    assert comm.nranks == 2 and [r.bus_id for r in comm.ranks] == ["63000", "64000"]
    assert comm.ended == "destroyed" and comm.summary.startswith("2 ranks, all pairs P2P/IPC")
    assert rep.errors[0].kind == "watchdog_timeout" and dict(rep.errors[0].extra)["op"] == "BROADCAST"
    assert rep.warnings[0].text == "Failed to open libibverbs.so[.1]"


def test_unknown_env_is_flagged_as_ignored() -> None:
    rep = parse_lines(
        [
            "n1:1:1 [0] NCCL INFO RCCL_ENABLE_XGMI set by environment to 1.",
            "n1:1:1 [0] NCCL INFO NCCL_MIN_NCHANNELS set by environment to 112.",
        ]
    )
    assert {e.name: e.known for e in rep.env} == {"RCCL_ENABLE_XGMI": False, "NCCL_MIN_NCHANNELS": True}
    (w,) = rep.warnings
    assert w.kind == "unknown_env" and "RCCL_ENABLE_XGMI=1" in w.text and "NCCL_P2P_LEVEL" in w.text


def test_junk_huge_and_binary_lines_are_counted_not_fatal(tmp_path: Path) -> None:
    f = tmp_path / "junk.log"
    good = "\n".join(rccl_rank_lines(0, 1)).encode()
    f.write_bytes(b"\x00\xff\xfe garbage \x1b[31m\n" + b"A" * (3 << 20) + b"\n" + good + b"\n" + b"\xc3\x28 tail")
    rep = parse_files([f])
    assert rep.comms[0].nranks == 1
    assert rep.unknown_lines == 3  # the binary line, the 3 MB line, the undecodable last line
    assert rep.lines == 3 + len(rccl_rank_lines(0, 1))


def test_unreadable_file_names_the_file(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=re.escape("nope.log")):
        parse_files([tmp_path / "nope.log"])
    with pytest.raises(InputError, match=re.escape(str(tmp_path))):
        parse_files([tmp_path])


def test_report_json_has_contract_keys() -> None:
    doc = report_json(_parse_ranks(rccl_rank_lines, 2).report())
    assert {"library", "version", "files", "lines", "comms", "transports", "warnings", "errors"} <= set(doc)
    comm = doc["comms"][0]
    assert {"id", "nranks", "ranks", "edges", "summary"} <= set(comm)
    assert {"rank", "dev", "bus_id", "host", "pid"} <= set(comm["ranks"][0])
    assert set(comm["edges"][0]) >= {"from", "to", "transport", "channels"}
    assert {"file", "line", "text"} <= set(doc["warnings"][0])


@pytest.mark.parametrize(
    ("tail", "transport"),
    [
        ("via P2P/IPC/read comm 0x1 nRanks 02", "P2P/IPC/read"),
        ("via P2P/IPC/CE comm 0x1 nRanks 02", "P2P/IPC/CE"),
        ("via P2P/CUMEM/read", "P2P/CUMEM/read"),
        ("via P2P/indirect/2[c6000] comm 0x1 nRanks 02", "P2P/indirect/2[c6000]"),
        ("via SHM/CE comm 0x1 nRanks 02", "SHM/CE"),
        ("[send] via NET/IB/1/GDRDMA comm 0x1 nRanks 02", "NET/IB/1/GDRDMA"),
        ("via P2P/direct pointer/read", "P2P/direct pointer/read"),
    ],
)
def test_transport_names(tail: str, transport: str) -> None:
    rep = parse_lines([f"n1:1:1 [0] NCCL INFO Channel 03/1 : 0[5000] -> 1[26000] {tail}"])
    assert dict(rep.transports) == {transport: 1}
    assert [(e.src, e.dst, e.channels) for e in rep.comms[0].edges] == [(0, 1, 1)]


def test_simserver_and_vllm_lines_are_known() -> None:
    from amdtop.simserver.logs import rccl_init_lines

    lines = [
        "(APIServer pid=812) INFO 11-29 14:41:40 [api_server.py:1234] Starting vLLM API server on http://127.0.0.1:8000",
        'INFO:     127.0.0.1:51234 - "POST /v1/completions HTTP/1.1" 200 OK',
        "(VllmWorker TP1 pid=815) INFO 11-29 14:41:41 [pynccl.py:70] vLLM is using nccl==2.22.3",
        *rccl_init_lines(4, 812),
    ]
    rep = parse_lines(lines)
    assert rep.unknown_lines == 0
    assert dict(rep.versions)["vllm-nccl"] == "2.22.3"
    (comm,) = rep.comms
    assert comm.summary == "4 ranks, all pairs P2P/IPC"


def test_channel_lines_sharing_a_rest_count_each_channel_once() -> None:
    # every channel of a rank pair prints the same text after ``Channel NN/c :``; the parser skips the regex for a
    # rest it met since the last Init line: the channel must still count, a malformed one must not
    h = "n1:10:11 [0] NCCL INFO "
    init = h + "ncclCommInitRank comm 0xa rank 0 nranks 2 cudaDev 0 busId 1000 commId 0x{} - Init START"
    rest = " : 0[1000] -> 1[2000] via P2P/IPC comm 0xa nRanks 02"
    lines = [init.format(1)]
    lines += [f"{h}Channel {c:02d}/0{rest}" for c in range(4)]
    lines += [f"{h}Channel 01/0{rest}", f"{h}Channel 0x/0{rest}", f"{h}Channel 02/{rest}", f"{h}Channel 05{rest}"]
    lines += [h + "comm 0xa rank 0 nranks 2 cudaDev 0 busId 1000 - Destroy COMPLETE", init.format(2)]
    lines += [f"{h}Channel {c:02d}/1{rest}" for c in range(2)]
    rep = parse_lines(lines)
    assert [(c.id, [(e.src, e.dst, e.transport, e.channels) for e in c.edges]) for c in rep.comms] == [
        ("0x1", [(0, 1, "P2P/IPC", 5)]),  # 00-03/0 and 05 (no connIndex); 01/0 again counts once
        ("0x2", [(0, 1, "P2P/IPC", 2)]),  # the reused pointer's new communicator gets its own channels
    ]
    assert rep.unknown_lines == 2 and dict(rep.transports) == {"P2P/IPC": 7}


def test_repeated_echo_lines_keep_the_latest_value() -> None:
    # the parser skips an env echo or a "Using network" line it met before: the newest value must still win
    h = "n1:10:11 [0] NCCL INFO "
    env = [f"{h}NCCL_P2P_LEVEL set by environment to {v}" for v in ("SYS", "XGMI", "SYS", "SYS")]
    nets = [f"{h}Using network {v}" for v in ("IB", "Socket", "IB", "Socket")]
    unknown = [f"{h}RCCL_ENABLE_XGMI set by environment to 1"] * 2
    rep = parse_lines(env + nets + unknown)
    assert [(e.name, e.value, e.known) for e in rep.env] == [
        ("NCCL_P2P_LEVEL", "SYS", True),
        ("RCCL_ENABLE_XGMI", "1", False),
    ]
    assert [n.network for n in rep.nics] == ["Socket"]
    assert [w.kind for w in rep.warnings] == ["unknown_env", "unknown_env"]  # one per echo, as before
