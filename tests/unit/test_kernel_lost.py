"""Issue 48's kernel misses, each on a real public capture (source in each fixture's first line) where one exists:
a GPU whose reset failed is lost; a failed probe names its GPU; an illegal command stream is read; an Xid 45 after an
NVSwitch SXid blames the switch; an Xid 119 is not the calling process's fault; an Xid 45 is never its own cause; a
GSP timeout is read on whichever GPU it is. Issue 52 bug 7: 100k reset episodes stay a bounded set of incidents."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from amdtop.logread.incidents.model import Incident
from amdtop.logread.kernel.events import FaultCause
from amdtop.logread.kernel.incidents import MAX_INCIDENTS, KernelVerdicts
from amdtop.logread.kernel.logfile import KernelLineReader
from amdtop.logread.kernel.monitor import KernelFaultMonitor
from amdtop.logread.kernel.parser import parse_lines
from amdtop.model import Topology, WorkerState, WorkerStatus
from amdtop.telemetry.base import BackendOptions
from amdtop.telemetry.sysfs import open_backend
from tests.fixtures.sysfs_tree import build_mi300x_8

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "kernel"


def lines(name: str) -> list[str]:
    return (FIXTURES / name).read_text().splitlines()[1:]


def verdicts(*names: str, extra: tuple[str, ...] = ()) -> KernelVerdicts:
    v = KernelVerdicts()
    for name in names:
        for line in lines(name):
            v.feed(line)
    for line in extra:
        v.feed(line)
    return v


def nowhere(_bdf: str) -> tuple[int | None, tuple[str, ...]]:
    return None, ()


def kinds(v: KernelVerdicts) -> dict[str, list[Incident]]:
    out: dict[str, list[Incident]] = {}
    for i in v.incidents(nowhere):
        out.setdefault(i.kind, []).append(i)
    return out


@pytest.fixture(scope="module")
def topology(tmp_path_factory: pytest.TempPathFactory) -> Topology:
    tree = build_mi300x_8(tmp_path_factory.mktemp("mi300x"))
    return open_backend(BackendOptions(sysfs_root=tree.root)).topology()


# -- lost --------------------------------------------------------------------------------------------------------------
def test_a_mode1_reset_that_failed_on_two_gpus_leaves_both_lost_rocm_2494() -> None:
    v = verdicts("amdgpu_mode1_reset_failed_two_gpus_rocm_2494.log")
    (lost,) = [i for i in v.incidents(nowhere) if i.kind == "gpu_lost"]
    assert dict(lost.detail)["bdfs"] == ("0000:03:00.0", "0000:83:00.0")
    assert "GPU mode1 reset failed" in lost.summary
    assert "reboot" in lost.fix and "drain" in lost.fix
    # "GPU reset succeeded, trying to resume" after the failure does not bring it back; a reset that lost every GPU
    # it took is told as their loss, not as a reset
    assert not [i for i in v.incidents(nowhere) if i.kind in ("hive_reset", "gpu_reset")]
    events = parse_lines(lines("amdgpu_mode1_reset_failed_two_gpus_rocm_2494.log"))
    failed = {e.bdf for e in events if e.cause is FaultCause.RESET_FAILED}
    assert failed == {"0000:03:00.0", "0000:83:00.0"}
    assert not [e for e in events if e.cause is FaultCause.RESET]  # one fault per GPU: the reset, failed


def test_the_smu_not_answering_after_a_reset_began_is_a_lost_gpu_rocm_1886() -> None:
    (lost,) = kinds(verdicts("amdgpu_uncorrectable_reset_mi50_rocm_1886.log"))["gpu_lost"]
    assert "0000:e3:00.0" in lost.summary and "Failed to send message 0x26" in lost.summary


def test_a_reset_that_succeeded_is_not_lost_and_a_ring_reset_failure_is_not_a_gpu_reset_failure() -> None:
    ok = [
        "[ 1.0] amdgpu 0000:03:00.0: amdgpu: GPU reset begin!",
        "[ 2.0] amdgpu 0000:03:00.0: amdgpu: SMU: I'm not done with your previous command!",
        "[ 3.0] amdgpu 0000:03:00.0: amdgpu: GPU reset(2) succeeded!",
    ]  # built from amdgpu_device.c's / smu_cmn.c's format strings
    found = kinds(verdicts(extra=tuple(ok)))
    assert "gpu_lost" not in found and found["gpu_reset"]
    found = kinds(verdicts("amdgpu_mode1_reset_vram_lost_wayvr_650.log"))  # "Ring gfx_0.0.0 reset failed", then MODE1
    assert "gpu_lost" not in found


def test_an_nvidia_gpu_fallen_off_the_bus_is_lost_nvsentinel_155() -> None:
    (lost,) = kinds(verdicts("nvidia_fallen_off_bus_nvsentinel_155.log"))["gpu_lost"]
    assert "0000:b3:00.0: fell off the bus" in lost.summary


# -- init --------------------------------------------------------------------------------------------------------------
def test_a_failed_probe_names_each_gpu_and_its_error_rocm_6281() -> None:
    (inc,) = kinds(verdicts("amdgpu_probe_failed_mi210_rocm_6281.log"))["gpu_init_failed"]
    assert dict(inc.detail)["bdfs"] == ("0000:83:00.0", "0000:c3:00.0")
    assert "probe error -12" in inc.summary


def test_an_invalid_ip_discovery_table_is_named_as_the_cause_rocm_1896() -> None:
    (inc,) = kinds(verdicts("amdgpu_ip_discovery_invalid_rocm_1896.log"))["gpu_init_failed"]
    assert dict(inc.detail)["bdfs"] == ("0000:03:00.0",)
    assert "IP discovery" in inc.cause and "power-cycle" in inc.fix


# -- illegal command stream --------------------------------------------------------------------------------------------
def test_illegal_register_access_is_read_with_the_process_that_sent_it_csgo_3386() -> None:
    events = parse_lines(lines("amdgpu_illegal_register_access_csgo_3386.log"))
    (bad,) = [e for e in events if e.cause is FaultCause.APP_EXCEPTION]
    assert bad.detail == "illegal register access in command stream, then ring gfx_0.0.0 timeout"
    assert (bad.bdf, bad.process, bad.pid) == ("0000:2f:00.0", "cs2", 320733)
    reader = KernelLineReader()
    for line in lines("amdgpu_illegal_register_access_csgo_3386.log"):
        reader.feed(line)
    (fault,) = [i for i in reader.incidents() if i.kind == "kernel_fault"]
    assert "illegal register access in command stream" in fault.summary and "cs2 pid 320733" in fault.summary


# -- NVIDIA ------------------------------------------------------------------------------------------------------------
# The Xid 45 line is BUILT from kernel_rc.c's format ("NVRM: Xid (PCI:%04x:%02x:%02x): %d, pid=%s, name=%s, %s%s") on
# gpud#338's SXid capture; the real capture of an SXid before an Xid 45 (ogkm#446) is tested below it.
XID45 = "NVRM: Xid (PCI:0000:18:00): 45, pid=2231, name=python3, Ch 00000008"


def test_an_xid_45_after_an_nvswitch_sxid_blames_the_switch_not_the_application(
    tmp_path: Path, topology: Topology
) -> None:
    v = verdicts("nvidia_sxid_gpud_338.log", extra=(XID45,))
    found = kinds(v)
    (switch,) = found["nvswitch_error"]
    assert "SXid 12028" in switch.summary
    (chain,) = found["xid_chain"]
    assert dict(chain.detail)["first_sxid"] == 12028
    assert "not the application" in chain.summary
    log = tmp_path / "kern.log"
    log.write_text("\n".join([*lines("nvidia_sxid_gpud_338.log"), XID45]) + "\n")
    mon = KernelFaultMonitor(log, worker_logs=False)
    flags = mon.poll(topology).flags
    mon.close()
    (xid45,) = [f for f in flags if dict(f.extra)["xid"] == 45]
    assert "SXid 12028" in xid45.message and "not the application" in xid45.message
    assert "application's bug" not in xid45.message


CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "failure_corpus"


def corpus(name: str) -> KernelVerdicts:
    """A failure-corpus capture (its source is in the .toml beside it), read line by line as the kernel reader does."""
    v = KernelVerdicts()
    for line in (CORPUS / name).read_text().splitlines():
        v.feed(line)
    return v


def test_an_xid_45_after_an_nvswitch_sxid_blames_the_switch_real_capture_ogkm_446() -> None:
    # The capture the built XID45 above stands in for: nvswitch1's SXid 24007 lines, then Xid 62 and two Xid 45s on
    # the vLLM worker's GPU 0000:48:00 (open-gpu-kernel-modules#446, 8x A100 SXM4)
    found = kinds(corpus("nvidia/sxid24007_before_xid62_xid45_vllm_a100_ogkm_446.log"))
    (switch,) = found["nvswitch_error"]
    assert "SXid 24007" in switch.summary and "0000:aa:00.0" in switch.summary
    (chain,) = found["xid_chain"]
    assert dict(chain.detail)["first_sxid"] == 24007
    assert dict(chain.detail)["bdfs"] == ("0000:48:00.0",)
    assert "not the application" in chain.summary and "VLLM::Worker" not in chain.summary
    assert "Xid 45 is the cause" not in chain.summary


def test_gsp_timeouts_on_two_gpus_are_both_read_and_each_names_the_other_real_capture_vllm_40652() -> None:
    # GPU5 (0001:6c:00) then GPU6 (0001:96:00) on one 8x A100 node, both raised in NVML's NvmlTaskRunner thread
    found = kinds(corpus("nvidia/xid119_gsp_timeout_two_gpus_nvml_caller_vllm_40652.log"))["gsp_timeout"]
    by = {dict(i.detail)["bdf"]: i for i in found}
    assert sorted(by) == ["0001:6c:00.0", "0001:96:00.0"]
    first, second = by["0001:6c:00.0"], by["0001:96:00.0"]
    assert dict(first.detail)["gsp_instance"] == "5" and dict(second.detail)["gsp_instance"] == "6"
    assert dict(first.detail)["other_gpus"] == ("0001:96:00.0",)
    assert "also timed out on 0001:96:00.0 (this GPU's came first)" in first.summary
    assert "also timed out on 0001:6c:00.0 (0001:6c:00.0's came first)" in second.summary
    assert all("NvmlTaskRunner" not in i.summary and "not the cause" in i.summary for i in found)
    assert all("several GPUs" in i.fix for i in found)


def test_a_single_gpu_gsp_timeout_names_no_other_gpu_gpud_500() -> None:
    (gsp,) = kinds(verdicts("nvidia_xid119_callers_gpud_500.log"))["gsp_timeout"]
    assert dict(gsp.detail)["other_gpus"] == () and "also timed out" not in gsp.summary


def test_xid_119_is_not_the_fault_of_the_process_that_called_the_driver_gpud_500() -> None:
    events = parse_lines(lines("nvidia_xid119_callers_gpud_500.log"))
    assert events and all(e.pid is None and e.process is None for e in events)
    assert "cache_mgr_main pid 28232 was calling the driver, not its cause" in (events[1].detail or "")
    (gsp,) = kinds(verdicts("nvidia_xid119_callers_gpud_500.log"))["gsp_timeout"]
    assert "0000:9b:00.0 x5" in gsp.summary and "not the cause" in gsp.summary
    assert dict(gsp.detail)["gsp_instance"] == "4"


def test_a_gsp_timeout_is_read_on_whichever_gpu_it_is_ogkm_1230() -> None:
    (gsp,) = kinds(verdicts("nvidia_gsp_timeout_gpu6_ogkm_1230.log"))["gsp_timeout"]
    assert "driver GPU6" in gsp.summary


def test_two_gpus_gsp_timeouts_are_two_incidents_one_each() -> None:
    # gpud#500's GPU4 (0000:9b:00) lines, then the same line form on a second GPU: BUILT (the address changed)
    second = lines("nvidia_xid119_callers_gpud_500.log")[0].replace("0000:9b:00", "0000:1a:00").replace("GPU4", "GPU1")
    found = kinds(verdicts("nvidia_xid119_callers_gpud_500.log", extra=(second,)))["gsp_timeout"]
    assert sorted(dict(i.detail)["bdf"] for i in found) == ["0000:1a:00.0", "0000:9b:00.0"]


def test_cleanups_naming_an_xid_45_never_take_a_later_xid_as_their_cause_real_capture_vllm_40652() -> None:
    # The minute after ogkm#446's window of the same crash: two Xid 45s "caused by previous Xid 45" on 0000:48:00,
    # THEN Xid 74 and Xid 154. The Xid 74 came after the cleanups: it cannot be their cause; theirs is before the log.
    found = kinds(verdicts("nvidia_xid45_after_xid45_xid74_gsp_second_gpu_vllm_40652.log"))
    (chain,) = found["xid_chain"]
    assert dict(chain.detail)["first_xid"] is None and "not in this log" in chain.summary
    assert "Xid 74" not in chain.summary and "Xid 45 is the cause" not in chain.summary


def test_a_gsp_timeout_banner_naming_no_gpu_is_read_on_the_gpu_its_report_header_names_real_capture_vllm_40652() -> (
    None
):
    # 580-era "_kgspLogXid119: *** GSP Timeout ***" prints no GPU number; its Xid 119 line is cut off, the driver's
    # "GPU at PCI:0000:0b:00" header after it names the GPU: a second GPU, not 0000:48:00 whose Xids came before
    (gsp,) = kinds(verdicts("nvidia_xid45_after_xid45_xid74_gsp_second_gpu_vllm_40652.log"))["gsp_timeout"]
    assert dict(gsp.detail)["bdf"] == "0000:0b:00.0"
    assert "Xid 119 line is not in the log" in gsp.summary


def test_an_earlier_xid_still_names_the_cleanups_cause_when_it_came_first() -> None:
    # BUILT: the capture's own lines with an Xid 62 of the same GPU (ogkm#446's window) put before them
    xid62 = "NVRM: Xid (PCI:0000:48:00): 62, 00002740 00002b08 00001126 0000117a 0000279f 0002a91a 00000011 00000000"
    v = KernelVerdicts()
    for line in [xid62, *lines("nvidia_xid45_after_xid45_xid74_gsp_second_gpu_vllm_40652.log")]:
        v.feed(line)
    (chain,) = kinds(v)["xid_chain"]
    assert dict(chain.detail)["first_xid"] == 62


def test_an_xid_45_naming_an_xid_45_is_never_its_own_cause() -> None:
    # BUILT from kernel_rc.c's format: the " caused by previous Xid %d" of a second cleanup names the first cleanup
    again = "NVRM: Xid (PCI:0000:61:00): 45, pid=1496200, name=python3, Ch 0000000a caused by previous Xid 45"
    (chain,) = kinds(verdicts(extra=(again,)))["xid_chain"]
    assert "not in this log" in chain.summary and "Xid 45 is the cause" not in chain.summary
    first = "NVRM: Xid (PCI:0000:61:00): 13, pid=1496200, name=python3, Graphics Exception: ESR 0x405840=0x1000000"
    (chain,) = kinds(verdicts(extra=(first, again)))["xid_chain"]
    assert "Xid 13 (graphics engine exception), is the cause" in chain.summary
    assert dict(chain.detail)["first_xid"] == 13


# -- the contract: a hive reset raises gpu_fault on every GPU it took ---------------------------------------------------
def test_a_hive_reset_flags_every_gpu_it_took_and_each_worker_on_them(tmp_path: Path, topology: Topology) -> None:
    # The built hive reset with "GPU reset begin!" kept on the GPU that asked only, as amdgpu_device_gpu_recover prints
    # it once; every GPU of the hive prints its "GPU mode1 reset" (BUILT, see the fixture's first line).
    hive = [ln for ln in lines("BUILT_mi300x_hive_mode1_reset.log") if "reset begin" not in ln or "65:00.0" in ln]
    log = tmp_path / "kern.log"
    log.write_text("\n".join(hive) + "\n")
    workers = (
        WorkerStatus("llama-a", WorkerState.READY, (0, 1, 2, 3)),
        WorkerStatus("llama-b", WorkerState.READY, (4, 5, 6, 7)),
    )
    mon = KernelFaultMonitor(log, worker_logs=False)
    update = mon.poll(topology, workers)
    mon.close()
    resets = [f for f in update.flags if dict(f.extra)["cause"] == "reset"]
    assert sorted(g for f in resets for g in f.gpus) == list(range(8))
    assert {f.worker for f in resets} == {"llama-a", "llama-b"}
    assert all("work was lost" in f.message for f in resets)
    (inc,) = [i for i in update.status.incidents if i.kind == "hive_reset"]
    assert inc.devices == tuple(range(8)) and "workers gone: llama-a, llama-b" in inc.summary


# -- issue 52 bug 7: bounded ---------------------------------------------------------------------------------------------
def test_100k_reset_episodes_are_a_bounded_set_of_incidents_with_a_count(tmp_path: Path) -> None:
    # bug 7's reproduction: a reset episode every 400 s (each its own episode), 100,000 times
    def episodes() -> list[str]:
        out = []
        for n in range(100_000):
            t = 1000.0 + 400.0 * n
            out.append(f"[{t:14.6f}] amdgpu 0000:05:00.0: amdgpu: GPU reset begin!")
            out.append(f"[{t + 0.1:14.6f}] amdgpu 0000:05:00.0: amdgpu: MODE1 reset")
            out.append(f"[{t + 0.2:14.6f}] amdgpu 0000:05:00.0: amdgpu: GPU reset(1) succeeded!")
        return out

    v = KernelVerdicts()
    for line in episodes():
        v.feed(line)
    incidents = v.incidents(nowhere)
    assert len(incidents) <= 3
    first, latest = incidents
    assert dict(first.detail)["repeats"] == 1
    assert dict(latest.detail)["repeats"] == 99_999 and "the latest of 99999 resets like it" in latest.summary
    # through logs parse: one report, bounded
    log = tmp_path / "dmesg.log"
    log.write_text("\n".join(episodes()) + "\n")
    out = subprocess.run(
        [sys.executable, "-m", "amdtop", "logs", "parse", str(log), "--json"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert len(doc["incidents"]) <= MAX_INCIDENTS and len(out.stdout) < 100_000


def test_distinct_devices_beyond_the_cap_are_counted_not_kept() -> None:
    v = KernelVerdicts()
    for n in range(5000):  # 5000 different (made-up) addresses, one failed probe each: BUILT from dd.c's format
        v.feed(f"amdgpu: probe of 0000:{n // 256:02x}:{n % 256 // 8:02x}.{n % 8} failed with error -22")
    (inc,) = v.incidents(nowhere)
    assert len(dict(inc.detail)["bdfs"]) == 64 and dict(inc.detail)["left_out"] == 5000 - 64


# -- logs parse reads kernel lines ---------------------------------------------------------------------------------------
def test_logs_parse_reads_a_saved_dmesg_and_keeps_its_keys(tmp_path: Path) -> None:
    log = tmp_path / "dmesg.txt"
    log.write_text("\n".join(lines("amdgpu_mode1_reset_failed_two_gpus_rocm_2494.log")) + "\n")
    nccl = Path(__file__).resolve().parents[1] / "fixtures" / "rccl"
    some = sorted(nccl.glob("*.log"))[0]
    docs = []
    for path in (log, some):
        out = subprocess.run(
            [sys.executable, "-m", "amdtop", "logs", "parse", str(path), "--json"], capture_output=True, text=True,
            timeout=120,
        )  # fmt: skip
        assert out.returncode == 0, out.stderr
        docs.append(json.loads(out.stdout))
    kernel, rccl = docs
    assert set(kernel) == set(rccl)  # one document shape, whatever the log
    by = {i["kind"]: i for i in kernel["incidents"]}
    assert by["gpu_lost"]["detail"]["bdfs"] == ["0000:03:00.0", "0000:83:00.0"]
    assert "kernel_fault" in by  # the page faults that came first


# -- more of each family, on the failure corpus's captures (copied with their sources) -----------------------------------
def read(name: str) -> list[Incident]:
    reader = KernelLineReader()
    for line in lines(name):
        reader.feed(line)
    return list(reader.incidents())


def test_smu_lines_that_name_no_gpu_after_a_reset_began_are_that_gpus_and_it_is_lost_acominer_9() -> None:
    (lost,) = [
        i for i in read("corpus_baco_reset_then_smu_fw_load_failed_rx480_acominer_9.log") if i.kind == "gpu_lost"
    ]
    assert "0000:03:00.0" in lost.summary


def test_a_reset_names_what_came_before_it_on_that_gpu_rocm_6018() -> None:
    (reset,) = [
        i for i in read("corpus_mes_remove_queue_failed_mode2_reset_780m_rocm_6018.log") if i.kind == "gpu_reset"
    ]
    assert "after MES failed to respond to msg=REMOVE_QUEUE" in reset.summary


def test_a_fatal_pcie_error_names_the_gpu_below_the_port_rocm_32() -> None:
    (aer,) = [
        i for i in read("corpus_pcie_aer_fatal_malformed_tlp_fury_nano_rocm_32.log") if i.kind == "hardware_error"
    ]
    assert "Malformed TLP" in aer.summary and "0000:06:00.0" in aer.summary and "recovery failed" in aer.summary


def test_the_older_gmc_fault_format_is_a_page_fault_with_its_process_appstream_71() -> None:
    (fault,) = [i for i in read("corpus_vm_fault_gpu_fault_detected_147_appstream_71.log") if i.kind == "kernel_fault"]
    assert "0005:01:00.0" in fault.summary and "pid 584845" in fault.summary


def test_rm_init_adapter_failed_is_a_named_init_failure_ogkm_1151() -> None:
    (init,) = [
        i
        for i in read("corpus_rm_init_adapter_failed_after_xid79_rtx5080_ogkm_1151.log")
        if i.kind == "gpu_init_failed"
    ]
    assert "0000:09:00.0" in init.summary and "RmInitAdapter" in init.cause


def test_gsp_heartbeat_lines_that_name_no_gpu_belong_to_the_xid_after_them_ogkm_1200() -> None:
    found = read("corpus_gsp_heartbeat_xid154_rtx5080_ogkm_1200.log")
    (gsp,) = [i for i in found if i.kind == "gsp_timeout"]
    assert "0000:01:00.0" in gsp.summary
    assert not [i for i in found if i.kind == "gpu_reset"]


def test_one_processs_xid_on_three_gpus_is_one_incident_naming_them_openmm_4393() -> None:
    (xid,) = [i for i in read("corpus_xid31_one_process_three_gpus_openmm_4393.log") if i.kind == "xid"]
    for bdf in ("0000:5e:00.0", "0000:86:00.0", "0000:af:00.0"):
        assert bdf in xid.summary
    assert "223309" in xid.summary


def test_a_log_naming_more_devices_than_a_node_has_keeps_a_bounded_set_open() -> None:
    # BUILT from amdgpu_job.c's format: 100k made-up addresses, one ring timeout each (issue 52: bounded readers)
    reader = KernelLineReader()
    for n in range(100_000):
        bdf = f"{n >> 16:04x}:{(n >> 8) & 0xFF:02x}:{(n >> 3) & 0x1F:02x}.{n & 7}"
        reader.feed(f"amdgpu {bdf}: amdgpu: ring gfx_0.0.0 timeout, signaled seq=1, emitted seq=2")
    assert len(reader._parser._open) <= 64
    found = reader.incidents()
    assert len(found) <= MAX_INCIDENTS + 64 and dict(found[-1].detail)["left_out"] > 0
