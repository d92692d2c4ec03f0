"""Incidents from logs: one verdict per incident, on real public captures (sources in each fixture's first line)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from amdtop.logread.incidents.model import Incident
from amdtop.logread.rccl.parser import parse_files, parse_lines
from amdtop.logread.rccl.unwrap import unwrap

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "incidents"


def _only(path: str, kind: str) -> Incident:
    report = parse_files([FIXTURES / path])
    found = [i for i in report.incidents if i.kind == kind]
    assert len(found) == 1, report.incidents
    return found[0]


def test_no_laggard_from_seqnums_of_unnamed_groups_pytorch_118369() -> None:
    # rank 0 printed four timeouts on three SeqNums (96117..96125), rank 7 one at 64088, and no line names a process
    # group: rank 0's several SeqNums may be several groups' counts, so 64088 is compared with none of them (issue 48:
    # SeqNums are compared only within one process group); the holdout-3 verdict of the same capture says so too
    i = _only("torch_laggard_pytorch_118369.log", "collective_timeout")
    assert i.laggard is None
    assert i.ranks == (0, 7)
    assert i.op == "ALLREDUCE"
    assert "no laggard can be named" in i.summary
    assert "is the laggard" not in i.summary
    assert dict(i.detail)["timeout_ms"] == 1800000


def test_same_seqnum_behind_line_numbers_llamafactory_7396() -> None:
    # every line behind a "[80746] " line number; ranks 0, 4 time out at 1580, rank 3's progress line says the same
    i = _only("torch_same_seq_lineno_llamafactory_7396.log", "collective_timeout")
    assert i.laggard is None
    assert i.ranks == (0, 3, 4)
    assert i.seq == 1580
    assert i.group == "PG 1"
    assert "no rank in this log is behind" in i.summary
    # rank 4 printed no "last completed" line: it is not reported, never placed at a SeqNum (issue 48)
    assert "rank 4 printed no last completed SeqNum (not reported)" in i.summary
    assert dict(i.detail)["not_reported"] == (4,)
    assert "what ran before" in i.cause
    assert not any(e.startswith("[80746]") for e in i.evidence)  # the viewer's line number is not the record


def test_wrapped_records_rejoined_milabench_269() -> None:
    # each record wrapped by the terminal after "timeout: ": without rejoining no SeqNum is read at all
    i = _only("torch_wrapped_milabench_269.log", "collective_timeout")
    assert i.ranks == (11, 12, 14, 15)
    assert i.seq == 2070
    assert i.op == "REDUCE"
    assert i.group == "PG 0 (default_pg)"


def test_every_rank_on_seqnum_1_is_a_path_that_never_worked_built() -> None:
    i = _only("BUILT_torch_seqnum1_never_worked.log", "collective_timeout")
    assert i.seq == 1
    assert "never completed" in i.summary
    assert "never worked" in i.cause and "P2P" in i.cause


def test_net_ib_status_12_device_is_not_the_rank_nccl_1405() -> None:
    i = _only("net_ib_status12_nccl_1405.log", "net_completion_error")
    assert i.devices == (4,)
    assert i.ranks == ()  # no line of this process names its rank: [4] is its device
    assert i.hosts == ("kp-ddp-worker-0",)
    assert dict(i.detail)["status"] == 12 and dict(i.detail)["vendor_err"] == 129
    assert "unreachable" in i.cause
    assert "10.216.210.236" in i.cause  # one host, one peer: that link


def test_net_ib_same_error_on_two_hosts_is_configuration_built() -> None:
    i = _only("BUILT_net_ib_two_hosts_named_ranks.log", "net_completion_error")
    assert i.ranks == (36, 44)  # named by each process's Init line, not the [4] of the WARN head
    assert i.devices == (4,)
    assert i.hosts == ("hostA", "hostB")
    assert "configuration" in i.cause
    assert "flushed" in i.summary  # the status-5 line is a consequence, counted, not the cause


def test_ray_worker_sigsegv_vllm_6783() -> None:
    i = _only("ray_sigsegv_vllm_6783.log", "worker_crashed")
    assert i.signal == "SIGSEGV"
    assert dict(i.detail)["pid"] == 24036
    assert "addProxyOpIfNeeded()" in i.summary
    assert any("ncclAllReduce" in e for e in i.evidence)


def test_ray_dedup_suffix_never_enters_an_env_value() -> None:
    lines = [
        "(RayWorkerWrapper pid=7, ip=10.0.0.2) n1:7:7 [1] NCCL INFO NCCL_IB_HCA set by environment to mlx5_0 "
        "[repeated 2x across cluster]",
    ]
    report = parse_lines(lines)
    assert [(e.name, e.value) for e in report.env] == [("NCCL_IB_HCA", "mlx5_0")]


def test_vllm_tp_prefix_names_the_rank_and_the_lines_before() -> None:
    lines = [
        "(VllmWorker TP1 pid=4242) INFO 07-20 17:27:20 [aiter.py:63] [aiter] start fused_moe kernel",
        "(VllmWorker TP0 pid=4241) INFO 07-20 17:27:20 [gpu_worker.py:10] step",
        "(VllmWorker TP1 pid=4242) Fatal Python error: Segmentation fault",
    ]
    report = parse_lines(lines)
    (i,) = report.incidents
    assert i.kind == "worker_crashed" and i.ranks == (1,) and i.signal == "SIGSEGV"
    assert "aiter" in i.summary
    assert "TP0" not in " ".join(i.evidence)  # another process's line is not this crash's evidence


def test_ray_prose_naming_sigsegv_is_not_a_crash() -> None:
    lines = [
        "(raylet) A worker died or was killed while executing a task by an unexpected system error. Some common "
        "causes include: (3) the worker crashed unexpectedly due to SIGSEGV or another unexpected error.",
    ]
    # a dead Ray worker (issue 48), but not a crash of a signal: the prose only lists possible causes
    (i,) = parse_lines(lines).incidents
    assert i.kind == "worker_died" and i.signal is None
    assert "SIGSEGV" not in i.summary


def test_unwrap_keeps_line_count_and_leaves_records_alone() -> None:
    wide = "x" * 100
    lines = [wide, "host:1:2 [0] NCCL INFO next record", "short", "tail"]
    assert unwrap(lines) == lines
    hard = ["a" * 100, "bc continued", "b" * 100]
    assert unwrap(hard) == ["a" * 100 + "bc continued", "", "b" * 100]


def test_logs_parse_json_keeps_its_keys_and_adds_incidents() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "amdtop", "logs", "parse", "--json", str(FIXTURES / "torch_laggard_pytorch_118369.log")],
        capture_output=True,
        text=True,
        check=True,
    )
    doc = json.loads(out.stdout)
    for key in ("library", "version", "files", "lines", "comms", "warnings", "errors", "flags", "env", "nics"):
        assert key in doc
    (inc,) = doc["incidents"]
    assert {"kind", "ranks", "laggard", "op", "seq", "cause", "evidence", "fix"} <= set(inc)
    assert inc["laggard"] is None and inc["ranks"] == [0, 7]  # SeqNums of unnamed groups are not compared


def test_incidents_travel_in_the_frame_to_json_exporter_and_pane(tmp_path: Path) -> None:
    from amdtop.exporter.families import build_families
    from amdtop.logread.rccl.monitor import LogMonitor
    from amdtop.pipeline import NodeFrame
    from amdtop.report import frame_json
    from amdtop.telemetry.sim import SimBackend
    from widgets.log_summary import render_logs

    log = tmp_path / "llama.log"
    log.write_text((FIXTURES / "ray_sigsegv_vllm_6783.log").read_text())
    monitor = LogMonitor([("llama", log)])
    try:
        update = monitor.poll()
    finally:
        monitor.close()
    (view,) = update.workers
    (inc,) = view.incidents
    assert inc.worker == "llama" and inc.signal == "SIGSEGV"
    backend = SimBackend()
    frame = NodeFrame(backend.sample(), logs=update)
    assert frame.incidents == (inc,)
    doc = frame_json(frame)
    assert doc["incidents"][0]["kind"] == "worker_crashed" and doc["incidents"][0]["worker"] == "llama"
    assert doc["logs"][0]["incidents"][0]["signal"] == "SIGSEGV"
    (family,) = [f for f in build_families(frame) if f.name == "amdtop_incidents"]
    counts = {s.labels["kind"]: s.value for s in family.samples}
    assert counts["worker_crashed"] == 1.0 and counts["collective_timeout"] == 0.0
    assert "!! worker_crashed [llama]" in render_logs(update.workers, update.flags).plain


def test_real_vllm_tp2_rank1_sigsegv_capture() -> None:
    # captured here from real vLLM (CPU) TP=2: tvm_ffi's handler printed the segfault without a process prefix;
    # vLLM's "VllmWorker-1 died" names the rank, and rank 1's own last lines are the lines before it
    path = Path(__file__).resolve().parents[1] / "fixtures" / "vllm_crash" / "tp2-rank1-sigsegv-cpu.log"
    (i,) = [i for i in parse_files([path]).incidents if i.kind == "worker_crashed"]
    assert i.signal == "SIGSEGV" and i.ranks == (1,)
    assert dict(i.detail)["pid"] == 25264
    assert "!!!!!!! Segfault encountered !!!!!!!" in i.evidence
    before = [e for e in i.evidence if e.startswith("(Worker_TP1 pid=25264) ")]
    assert before and "last line before: (Worker_TP1 pid=25264)" in i.summary
    assert any("VllmWorker-1 died unexpectedly" in e for e in i.evidence)


def test_sigkill_capture_without_a_signal_line_is_no_crash_incident() -> None:
    # SIGKILL prints nothing and vLLM logged "exit code: None": the log alone cannot say a signal (health does)
    path = Path(__file__).resolve().parents[1] / "fixtures" / "vllm_crash" / "tp2-rank1-sigkill-cpu.log"
    assert not [i for i in parse_files([path]).incidents if i.kind == "worker_crashed"]


def test_died_with_a_negative_exit_code_is_a_signal() -> None:
    line = (
        "(EngineCore pid=6722) ERROR 12-02 06:43:26 [multiproc_executor.py:315] Worker proc VllmWorker-1 died "
        "unexpectedly (exit code: -11), shutting down executor."
    )
    (i,) = parse_lines(["(Worker_TP1 pid=7) INFO 12-02 06:43:20 [x.py:1] step", line]).incidents
    assert (i.signal, i.ranks) == ("SIGSEGV", (1,))


def test_torn_line_rejoined_and_dedup_suffix_dropped_built() -> None:
    report = parse_files([FIXTURES / "BUILT_torn_vllm_into_rccl.log"])
    env = {e.name: e.value for e in report.env}
    # the torn record's value rejoined from its two halves; the Ray line's value without the dedup suffix
    assert env == {"NCCL_SOCKET_IFNAME": "ens50f0", "NCCL_IB_DISABLE": "1", "NCCL_SOCKET_NTHREADS": "4"}
    assert report.unknown_lines == 0


def test_untear_without_the_rest_drops_the_cut_record() -> None:
    from amdtop.logread.rccl.unwrap import untear

    torn = ["n1:1:1 [0] NCCL INFO NCCL_IB_HCA set by environment to ml(Worker_TP1 pid=2) INFO 12-02 x", "n1:1:1 [0] ok"]
    assert list(untear(torn)) == ["(Worker_TP1 pid=2) INFO 12-02 x", "n1:1:1 [0] ok"]
    clean = ["(Worker_TP1 pid=2) n1:2:2 [1] NCCL INFO Init COMPLETE"]  # a prefix before the record is no tear
    assert untear(clean) is clean


def test_ray_worker_rank_comes_from_its_nccl_lines() -> None:
    lines = [
        "(RayWorkerWrapper pid=24036, ip=10.0.0.2) n2:24036:24036 [0] NCCL INFO comm 0x55a1 rank 1 nranks 2 cudaDev 0 "
        "busId 1000 commId 0x5ae7 - Init COMPLETE",
        "(RayWorkerWrapper pid=24036, ip=10.0.0.2) INFO 07-25 10:45:59 [aiter.py:63] [aiter] fused_moe start",
        "(RayWorkerWrapper pid=24036, ip=10.0.0.2) *** SIGSEGV received at time=1721904360 on cpu 140 ***",
    ]
    (i,) = parse_lines(lines).incidents
    assert (i.ranks, i.hosts, i.signal) == ((1,), ("10.0.0.2",), "SIGSEGV")
    assert "aiter" in i.summary
