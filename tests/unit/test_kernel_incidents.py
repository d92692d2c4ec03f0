"""Kernel verdicts: faults from before amdtop started (with their age, old ones as history), hive resets, ACA records,
correctable bursts, Xid chains and Xid 94 vs 95, on real public captures where one exists (sources in each fixture)."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

from amdtop.logread.kernel.incidents import KernelVerdicts, decode_mca_status, mca_severity
from amdtop.logread.kernel.monitor import KernelFaultMonitor
from amdtop.logread.kernel.sources import SourceUnavailable, open_kernel_source
from amdtop.model import Topology, WorkerState, WorkerStatus
from amdtop.telemetry.base import BackendOptions
from amdtop.telemetry.sysfs import open_backend
from tests.fixtures.sysfs_tree import build_mi300x_8

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "kernel"
XID43 = "[{ts:12.6f}] NVRM: Xid (PCI:0000:c6:00): 43, pid=4242, name=python3, Ch 00000008"


def lines(name: str) -> list[str]:
    return (FIXTURES / name).read_text().splitlines()[1:]


def verdicts(name: str) -> KernelVerdicts:
    v = KernelVerdicts()
    for line in lines(name):
        v.feed(line)
    return v


def nowhere(_bdf: str) -> tuple[int | None, tuple[str, ...]]:
    return None, ()


@pytest.fixture(scope="module")
def topology(tmp_path_factory: pytest.TempPathFactory) -> Topology:
    tree = build_mi300x_8(tmp_path_factory.mktemp("mi300x"))
    return open_backend(BackendOptions(sysfs_root=tree.root)).topology()


class RingBuffer:
    """A kernel source whose stamps are seconds since boot, like ``/dev/kmsg`` (what the monitor dates lines by)."""

    name = "/dev/kmsg"
    boot_clock = True

    def __init__(self, lines: list[str]) -> None:
        self.lines = lines

    def read(self) -> list[str]:
        out, self.lines = self.lines, []
        return out

    def close(self) -> None:
        pass


def _monitor(tmp_path: Path, src: RingBuffer, uptime: float, wall: float) -> KernelFaultMonitor:
    proc = tmp_path / "proc"
    proc.mkdir(exist_ok=True)
    (proc / "uptime").write_text(f"{uptime:.2f} 1.00\n")
    clock = [1000.0]
    mon = KernelFaultMonitor(
        source=src, proc_root=proc, clock=lambda: clock[0], wall=lambda: wall, worker_logs=False, hold_s=600
    )
    mon._boot_wall = mon._boot_time()  # the source was given, not opened: date its lines as _open would
    return mon


def test_a_fault_40s_before_start_is_a_live_flag_with_its_time(tmp_path: Path, topology: Topology) -> None:
    # the operator arrives 40 s after a device-side assert: the Xid is on screen, dated when it happened
    src = RingBuffer([XID43.format(ts=5000.0 - 40)])
    mon = _monitor(tmp_path, src, uptime=5000.0, wall=1_700_000_000.0)
    workers = (WorkerStatus("llama", WorkerState.READY, (6,)),)
    update = mon.poll(topology, workers)
    (flag,) = update.flags
    assert flag.gpus == (6,) and dict(flag.extra)["xid"] == 43
    assert dict(flag.extra)["since"] == pytest.approx(1_700_000_000.0 - 40, abs=0.01)
    assert update.status.incidents == ()


def test_an_old_fault_is_history_with_its_age_not_an_alarm(tmp_path: Path, topology: Topology) -> None:
    src = RingBuffer([XID43.format(ts=100.0)])
    mon = _monitor(tmp_path, src, uptime=100.0 + 7200, wall=1_700_000_000.0)
    update = mon.poll(topology)
    assert update.flags == ()
    (inc,) = update.status.incidents
    assert inc.historic and inc.kind == "kernel_fault"
    assert inc.age_s == pytest.approx(7200, abs=1)
    assert inc.summary.startswith("2 h ago: GPU 6")
    # the Logs pane's head shows it as history, not as an alarm
    from widgets.log_summary import render_logs

    head = render_logs((), (), kernel=update.status.incidents)
    assert head.plain.startswith("history: kernel_fault: 2 h ago: GPU 6")
    assert not any("red" in str(span.style) for span in head.spans)


def test_default_kernel_source_reads_the_ring_buffer_from_its_start() -> None:
    # a line logged before the source was opened is read: what a dashboard started after a fault needs
    if not os.access("/dev/kmsg", os.W_OK):
        pytest.skip("/dev/kmsg not writable: cannot log a marker")
    marker = f"amdtop-test before-start marker {uuid.uuid4()}"
    with open("/dev/kmsg", "w") as f:
        f.write(marker + "\n")
    try:
        src = open_kernel_source(None)
    except SourceUnavailable as exc:
        pytest.skip(f"no kernel log here: {exc}")
    try:
        got = [line for line in src.read() if marker in line]
    finally:
        src.close()
    assert len(got) == 1
    assert got[0].startswith("[") and "] " in got[0]  # stamped with its time since boot


def test_aca_status_bits_decoded_rocm_4021() -> None:
    fatal = decode_mca_status(0xFAA00000000D080B)
    assert fatal["valid"] and fatal["uncorrected"] and fatal["context_corrupt"] and fatal["overflow"]
    assert mca_severity(fatal) == "fatal"
    assert mca_severity(decode_mca_status(0xBAA000000000080B)) == "fatal"
    assert mca_severity(decode_mca_status(0x98000800003E0000)) == "corrected"
    incidents = verdicts("amdgpu_aca_fatal_mi300x_rocm_4021_lhl.log").incidents(nowhere)
    (aca,) = [i for i in incidents if i.kind == "hardware_error" and "records" in dict(i.detail)]
    (first,) = [i for i in incidents if i.kind == "hardware_error" and "culprit_bdfs" in dict(i.detail)]
    assert "uncorrectable hardware error on 0000:dd:00.0" in first.summary  # no reset in the excerpt: still named
    assert dict(aca.detail)["bdf"] == "0000:4e:00.0" and dict(aca.detail)["records"] == 2
    assert "fatal" in aca.summary and "drain" in aca.fix
    corrected = verdicts("amdgpu_uncorrectable_mi300x_rocm_4021.log").incidents(nowhere)
    assert {dict(i.detail)["severity"] for i in corrected if "severity" in dict(i.detail)} == {"corrected"}


def test_mode1_reset_lost_vram_wayvr_650() -> None:
    (inc,) = verdicts("amdgpu_mode1_reset_vram_lost_wayvr_650.log").incidents(nowhere)
    assert inc.kind == "gpu_reset"
    assert "VRAM lost" in inc.summary and "0000:2d:00.0" in inc.summary


def test_hive_reset_names_the_one_gpu_with_the_error_and_every_gpu_and_worker_lost_built() -> None:
    def place(bdf: str) -> tuple[int | None, tuple[str, ...]]:
        from amdtop.telemetry.sim import MI300X_BDFS

        gpu = MI300X_BDFS.index(bdf)
        return gpu, ("llama-a",) if gpu < 4 else ("llama-b",)

    incidents = verdicts("BUILT_mi300x_hive_mode1_reset.log").incidents(place)
    (hive,) = [i for i in incidents if i.kind == "hive_reset"]
    assert hive.devices == tuple(range(8))
    assert dict(hive.detail)["culprit_bdfs"] == ("0000:65:00.0",)
    assert "uncorrectable error on GPU 3 (0000:65:00.0)" in hive.summary
    assert "workers gone: llama-a, llama-b" in hive.summary
    per_gpu = dict(hive.detail)["per_gpu"]
    assert len(per_gpu) == 8 and all(workers for _b, _g, workers in per_gpu)
    (burst,) = [i for i in incidents if i.kind == "correctable_errors"]
    assert burst.devices == (1,) and dict(burst.detail)["block"] == "xgmi_wafl" and "XGMI link" in burst.cause


def test_two_hive_resets_hours_apart_are_two_incidents_the_old_one_history(tmp_path: Path, topology: Topology) -> None:
    # The ring buffer since boot holds the built hive reset (its lines at 7000-7041 s) and the same again 3 h later:
    # two episodes, two verdicts; read a minute after the second, the first is history with its age, the second live.
    first = lines("BUILT_mi300x_hive_mode1_reset.log")
    later = [f"[{float(ln[1:ln.index(']')]) + 3 * 3600:14.6f}]{ln[ln.index(']') + 1 :]}" for ln in first]
    both = KernelVerdicts()
    for line in (*first, *later):
        both.feed(line)
    hives = [i for i in both.incidents(nowhere) if i.kind == "hive_reset"]
    assert [dict(i.detail)["episode"] for i in hives] == [0, 1]
    assert [dict(i.detail)["first_ts"] for i in hives] == [7040.0, 7040.0 + 3 * 3600]
    assert all(dict(i.detail)["culprit_bdfs"] == ("0000:65:00.0",) for i in hives)
    mon = _monitor(tmp_path, RingBuffer([*first, *later]), uptime=7040.0 + 3 * 3600 + 60, wall=1_700_000_000.0)
    old, new = [i for i in mon.poll(topology).status.incidents if i.kind == "hive_reset"]
    assert old.historic and old.age_s == pytest.approx(3 * 3600 + 60, abs=1) and old.summary.startswith("3 h ago: ")
    assert not new.historic and new.age_s == pytest.approx(60, abs=1)
    mon.close()


def test_xid_45_chain_points_at_the_nvlink_xid_ogkm_1150(tmp_path: Path, topology: Topology) -> None:
    incidents = verdicts("nvidia_xid45_after_nvlink_ogkm_1150.log").incidents(nowhere)
    chains = {dict(i.detail)["first_xid"]: i for i in incidents if i.kind == "xid_chain"}
    assert set(chains) == {145, 149}
    assert "Xid 149 is the cause" in chains[149].summary
    assert "NVLink" in chains[145].cause
    # the live flag of a chained Xid 45 says so too, instead of "usually the application's bug"
    log = tmp_path / "kern.log"
    log.write_text("\n".join(lines("nvidia_xid45_after_nvlink_ogkm_1150.log")) + "\n")
    mon = KernelFaultMonitor(log, worker_logs=False)
    flags = mon.poll(topology).flags
    mon.close()
    assert flags and all("is the cause" in f.message for f in flags)
    assert not any("application's bug" in f.message for f in flags)


def test_xid_94_restart_the_application_95_drain_the_gpu_gpud_1174() -> None:
    incidents = verdicts("nvidia_xid94_95_gpud_1174.log").incidents(nowhere)
    by = {dict(i.detail)["xid"]: i for i in incidents if i.kind == "ecc"}
    assert "restart the application" in by[94].fix
    assert "drain the GPU" in by[95].fix


def test_kernel_incidents_travel_in_the_frame_through_the_serve_wire(tmp_path: Path, topology: Topology) -> None:
    import socket

    from amdtop.pipeline import NodeFrame
    from amdtop.report import frame_json
    from amdtop.serve.wire import read_message, send_message
    from amdtop.telemetry.sim import SimBackend

    src = RingBuffer([XID43.format(ts=100.0)])
    status = _monitor(tmp_path, src, uptime=100.0 + 7200, wall=1_700_000_000.0).poll(topology).status
    frame = NodeFrame(SimBackend().sample(), kernel_log=status)
    a, b = socket.socketpair()
    with a, b:
        send_message(a, {"frame": frame})
        got = read_message(b)["frame"]
    assert got.incidents == frame.incidents and got.incidents[0].historic
    (doc,) = frame_json(got)["incidents"]
    assert doc["kind"] == "kernel_fault" and doc["historic"] is True and doc["age_s"] == 7200.0


def test_real_h200_xid43_read_40s_later_from_the_ring_buffer(tmp_path: Path) -> None:
    # The lead's capture: a device-side assert gave this Xid 43 on the lent H200 (bus 00:06); `snapshot` 40 s later
    # read 0 lines. The ring buffer read from its start hands it over with its stamp (built: the capture is dmesg -T,
    # so the seconds-since-boot stamp /dev/kmsg gives is made up here), on the recorded H200 topology.
    from amdtop.telemetry.nvml import NvmlBackend
    from amdtop.telemetry.nvml_replay import ReplayNvml, load_fixture, materialize

    fixture = load_fixture(Path(__file__).resolve().parents[1] / "fixtures" / "nvml" / "h200_replay.json")
    sysfs, proc = materialize(fixture, tmp_path / "h200")
    topology = NvmlBackend(ReplayNvml(fixture), BackendOptions(sysfs_root=sysfs, proc_root=proc)).topology()
    (real,) = [ln for ln in lines("nvidia_xid43_h200_session12.log") if "Xid" in ln]
    message = real.split("] ", 1)[1]  # without dmesg -T's wall-clock prefix
    assert message == "NVRM: Xid (PCI:0000:00:06): 43, pid=495, name=python3, channel 0x0000000a"
    src = RingBuffer([f"[{60.0:12.6f}] {message}"])
    mon = _monitor(tmp_path, src, uptime=100.0, wall=1_764_754_613.0)
    (flag,) = mon.poll(topology).flags
    assert flag.gpus == (0,) and dict(flag.extra)["xid"] == 43 and dict(flag.extra)["pid"] == 495
    assert dict(flag.extra)["since"] == pytest.approx(1_764_754_613.0 - 40, abs=0.01)
