"""The reader on public captures (issue 48): one incident per failure, named from the lines that name it, and a
verdict that claims nothing no line says. Each log is a real capture; its source is in the fixture's first line or in
the failure corpus's .toml beside it."""

from __future__ import annotations

from pathlib import Path

from amdtop.logread import Reader, build, read_head, read_lines
from amdtop.logread.incidents.model import Incident
from amdtop.logread.rccl.files import parse_files

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
CORPUS = FIXTURES / "failure_corpus"
OWN = FIXTURES / "logread"


def _incidents(path: Path) -> tuple[Incident, ...]:
    return parse_files([path]).incidents


def _text(i: Incident) -> str:
    return f"{i.summary} {i.cause} {dict(i.detail)}".lower()


# -- init failures: one incident naming what failed, where ---------------------------------------------------------
def test_invalid_kernel_file_is_one_init_incident_naming_it_rccl_876() -> None:
    (i,) = _incidents(CORPUS / "nccl" / "rccl_876_invalid_kernel_file.log")
    assert i.kind == "comm_init_failed"
    assert "invalid kernel file" in i.summary
    assert i.hosts == ("catalyst-convoy",) and i.devices == (0,)
    assert "lines" in dict(i.detail) and dict(i.detail)["lines"] == 2  # the WARN printed twice is one incident


def test_net_plugin_memory_registration_failure_names_host_and_device_nccl_563() -> None:
    (i,) = _incidents(OWN / "nccl_563_ofi_register_memory.log")
    assert i.kind == "comm_init_failed"
    assert "register" in i.summary.lower() and "cannot allocate memory" in i.summary.lower()
    assert i.hosts == ("ip-10-0-87-143",) and i.devices == (5,)


def test_gdr_registration_failure_of_the_plugin_aws_ofi_584() -> None:
    (i,) = _incidents(OWN / "aws_ofi_584_gdr_register.log")
    assert i.kind == "comm_init_failed"
    assert "GDR" in i.summary and "invalid argument" in i.summary.lower()


def test_hip_ipc_handle_failure_is_an_init_incident_rocm_systems_7864() -> None:
    (i,) = _incidents(OWN / "rocm_systems_7864_hipipc.log")
    assert i.kind == "comm_init_failed"
    assert "hipIpcGetMemHandle" in i.summary and "invalid argument" in i.summary


# -- dead peers and NICs ------------------------------------------------------------------------------------------------
def test_remote_error_names_the_peer_stanford_alpaca_207() -> None:
    incidents = _incidents(CORPUS / "pytorch" / "stanford_alpaca_207_remote_error_one_line.log")
    assert any(i.kind in ("peer_lost", "net_completion_error") and "11.214.147.122" in _text(i) for i in incidents)


def test_ib_port_error_on_one_nic_lit_llama_380() -> None:
    incidents = _incidents(CORPUS / "nccl" / "lit_llama_380_ib_port_error.log")
    (flap,) = [i for i in incidents if i.kind == "nic_flap"]
    assert "port error" in flap.summary


def test_ray_worker_death_before_the_remote_error_is_the_first_cause_vllm_pr38529() -> None:
    incidents = _incidents(CORPUS / "ray" / "vllm_pr38529_raylet_worker_died_engine_start.log")
    assert incidents[0].kind == "worker_died"
    assert "442" in _text(incidents[0])


# -- HIP faults in worker logs ------------------------------------------------------------------------------------------
def test_memory_access_fault_on_a_null_address_rocm_1017() -> None:
    (i,) = [i for i in _incidents(CORPUS / "runtime" / "rocm_1017_nil_fault_under_mpirun.log")]
    assert i.kind == "gpu_memory_fault" and "(nil)" in i.summary


def test_faults_on_three_gpus_at_once_are_one_incident_rocm_2494() -> None:
    (i,) = _incidents(OWN / "rocm_2494_fault_three_gpus.log")
    assert i.kind == "gpu_memory_fault"
    assert dict(i.detail)["gpu_nodes"] == ("2", "3", "4")
    assert i.devices == ()  # node-N is ROCr's agent node, not a HIP device index: no device is claimed
    assert i.ranks == ()  # DeepSpeed's "[Rank 0] step=1" line before them is not the faults' rank


def test_invalid_device_ordinal_under_ray_vllm_16646() -> None:
    incidents = _incidents(CORPUS / "runtime" / "vllm_16646_ray_worker_invalid_device_ordinal.log")
    assert incidents[0].kind == "startup_failed"
    assert "invalid device ordinal" in incidents[0].summary


# -- watchdog verdicts say only what the lines say ----------------------------------------------------------------------
def test_one_reporting_rank_is_one_rank_sglang_1693() -> None:
    (i,) = _incidents(CORPUS / "pytorch" / "sglang_1693_single_rank_allgather_pg3.log")
    assert i.kind == "collective_timeout" and len(i.ranks) == 1 and i.laggard is None
    assert "every rank" not in _text(i)


def test_rank_without_last_completed_is_not_reported_llamafactory_6269() -> None:
    (i,) = _incidents(CORPUS / "pytorch" / "llamafactory_6269_reduce_scatter_rank3_no_last_completed.log")
    assert i.ranks == (0, 3, 4) and i.laggard is None
    assert dict(i.detail)["not_reported"] == (3,)
    assert "rank 3 printed no last completed seqnum (not reported)" in i.summary.lower()


def test_seqnums_of_two_process_groups_are_not_compared() -> None:
    # built from ProcessGroupNCCL's format strings (logPrefix + watchdog/progress lines): two groups, one rank each;
    # PG 1 at 7 and PG 2 at 900 are two counts, so neither rank is anyone's laggard
    lines = [
        "[rank0]:[E1206 18:44:12.715 ProcessGroupNCCL.cpp:607] [PG ID 1 PG GUID 1 Rank 0] Watchdog caught collective "
        "operation timeout: WorkNCCL(SeqNum=7, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for "
        "600061 milliseconds before timing out.",
        "[rank0]:[E1206 18:44:12.716 ProcessGroupNCCL.cpp:1664] [PG ID 1 PG GUID 1 Rank 0] Exception (either an error "
        "or timeout) detected by watchdog at work: 7, last enqueued NCCL work: 7, last completed NCCL work: 6.",
        "[rank1]:[E1206 18:44:13.715 ProcessGroupNCCL.cpp:607] [PG ID 2 PG GUID 2 Rank 0] Watchdog caught collective "
        "operation timeout: WorkNCCL(SeqNum=900, OpType=ALLGATHER, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for "
        "600061 milliseconds before timing out.",
        "[rank1]:[E1206 18:44:13.716 ProcessGroupNCCL.cpp:1664] [PG ID 2 PG GUID 2 Rank 0] Exception (either an error "
        "or timeout) detected by watchdog at work: 900, last enqueued NCCL work: 900, last completed NCCL work: 899.",
    ]
    from amdtop.logread.rccl.parser import parse_lines

    incidents = [i for i in parse_lines(lines).incidents if i.kind == "collective_timeout"]
    assert len(incidents) == 2
    assert all(i.laggard is None for i in incidents)


# -- the engine's rules, on its own ---------------------------------------------------------------------------------------
def test_first_cause_opens_and_later_consequences_join() -> None:
    lines = (OWN / "rocm_2494_fault_three_gpus.log").read_text().splitlines()[1:]
    lines.append("Worker proc VllmWorker-2 died unexpectedly, shutting down executor.")  # built from vLLM's format
    (i,) = read_lines(lines)
    assert i.kind == "gpu_memory_fault"
    assert "vLLM worker process died" in i.summary  # joined, not a second verdict


def test_a_consequence_alone_says_no_first_cause_was_printed() -> None:
    # built from PyTorch's heartbeat-monitor format string
    (i,) = read_lines(
        ["[PG 0 Rank 3] Heartbeat monitor timed out! Process will be terminated after dumping debug info."]
    )
    assert i.kind == "collective_timeout" and i.ranks == (3,)
    assert "no first cause was printed" in i.cause


def test_prefixes_name_time_rank_host_and_device() -> None:
    h = read_head("(RayWorkerWrapper pid=2310, ip=10.0.0.3) ERROR 03-12 10:11:12 [worker.py:1] boom")
    assert (h.actor, h.pid, h.host, h.text) == ("RayWorkerWrapper", 2310, "10.0.0.3", "boom")
    h = read_head("[rank4]:[E ProcessGroupNCCL.cpp:1316] [PG 5 Rank 0] Heartbeat monitor timed out!")
    assert h.rank == 4  # torchrun's global rank, not the rank within PG 5
    h = read_head("node1:12:34 [3] transport/net_ib.cc:101 NCCL WARN NET/IB : mlx5_0:1 Got async event : port error")
    assert (h.host, h.pid, h.dev, h.text) == ("node1", 12, 3, "NET/IB : mlx5_0:1 Got async event : port error")


def test_a_repeated_line_is_one_sighting_with_a_count() -> None:
    reader = Reader()
    line = "Memory access fault by GPU node-2 (Agent handle: 0x1) on address (nil). Reason: Unknown."
    for n in range(10000):
        reader.feed(line, "w.log", n + 1)
    (s,) = reader.sightings()
    assert s.count == 10000
    (b,) = build(reader.sightings())
    assert "[10000 lines]" in b.incident.summary


# -- the same reader on a worker's own log (the Logs pane's tail, snapshot --json, the exporter) -------------------------
def test_a_hip_fault_in_a_workers_log_is_an_incident_of_that_worker(tmp_path: Path) -> None:
    from amdtop.exporter.families import build_families
    from amdtop.logread.rccl.monitor import LogMonitor
    from amdtop.pipeline import NodeFrame
    from amdtop.report import frame_json
    from amdtop.telemetry.sim import SimBackend

    log = tmp_path / "llama.log"
    log.write_text((CORPUS / "runtime" / "rocm_1017_nil_fault_under_mpirun.log").read_text())
    monitor = LogMonitor([("llama", log)])
    try:
        update = monitor.poll()
    finally:
        monitor.close()
    (view,) = update.workers
    (inc,) = view.incidents
    assert inc.kind == "gpu_memory_fault" and inc.worker == "llama" and "(nil)" in inc.summary
    frame = NodeFrame(SimBackend().sample(), logs=update)
    assert frame_json(frame)["incidents"][0]["kind"] == "gpu_memory_fault"
    (family,) = [f for f in build_families(frame) if f.name == "amdtop_incidents"]
    assert {s.labels["kind"]: s.value for s in family.samples}["gpu_memory_fault"] == 1.0
