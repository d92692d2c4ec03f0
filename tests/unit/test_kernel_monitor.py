"""The kernel-fault monitor on real sources: a log file that grows (real appends, truncation, replacement),
/dev/kmsg where this host lets us read it, journalctl that exits, and sources that cannot be opened."""

from __future__ import annotations

import os
import shutil
import time
import uuid
from pathlib import Path

import pytest

from amdtop.logread.kernel.monitor import KernelFaultMonitor
from amdtop.logread.kernel.sources import FileSource, JournalSource, KmsgSource, SourceUnavailable, open_kernel_source
from amdtop.model import FlagKind, Topology, WorkerState, WorkerStatus
from amdtop.pipeline import NodePipeline
from amdtop.report import frame_json
from amdtop.telemetry.base import BackendOptions
from amdtop.telemetry.none_backend import NoneBackend
from amdtop.telemetry.sysfs import open_backend
from tests.fixtures.sysfs_tree import build_mi300x_8

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "kernel"
HEAD = (
    "[ 4778.915423] amdgpu 0000:c6:00.0: amdgpu: [gfxhub0] no-retry page fault (src_id:0 ring:24 vmid:3 pasid:32769)\n"
)
PROC = "[ 4778.916081] amdgpu 0000:c6:00.0: amdgpu:  for process pt_main_thread pid 12924 thread pt_main_thread pid 12924)\n"
RESET = "[ 4790.000000] amdgpu 0000:c6:00.0: amdgpu: GPU reset begin!\n"


def fixture_lines(name: str) -> str:
    return "".join(line + "\n" for line in (FIXTURES / name).read_text().splitlines()[1:])


@pytest.fixture(scope="module")
def topology(tmp_path_factory: pytest.TempPathFactory) -> Topology:
    tree = build_mi300x_8(tmp_path_factory.mktemp("mi300x"))
    return open_backend(BackendOptions(sysfs_root=tree.root)).topology()


def test_file_source_follows_appends_partial_lines_truncation_and_replacement(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    log.write_text("one\ntw")
    src = FileSource(log)
    assert src.read() == ["one"]
    with log.open("a") as f:
        f.write("o\nthree\n")
    assert src.read() == ["two", "three"]
    assert src.read() == []
    log.write_text("new\n")  # truncated in place
    assert src.read() == ["new"]
    other = tmp_path / "kern.log.new"
    other.write_text("rotated\n")
    os.replace(other, log)  # logrotate's create: a new file under the name
    assert src.read() == ["rotated"]
    src.close()


def test_monitor_follows_a_growing_file_and_counts_repeats(tmp_path: Path, topology: Topology) -> None:
    log = tmp_path / "kern.log"
    log.write_text("[    1.0] Linux version 6.8.0\n")
    now = [100.0]
    mon = KernelFaultMonitor(log, clock=lambda: now[0], wall=lambda: 1764412345.0, hold_s=60)
    llama = WorkerStatus(
        "llama", WorkerState.READY, (4, 5, 6, 7), rank_pids=((0, 12921), (1, 12922), (2, 12924), (3, 12925))
    )
    assert mon.poll(topology, [llama]).flags == ()
    with log.open("a") as f:
        f.write(HEAD + PROC)
    (flag,) = mon.poll(topology, [llama]).flags
    facts = dict(flag.extra)
    assert flag.kind is FlagKind.GPU_FAULT and flag.worker == "llama" and flag.gpus == (6,)
    assert {k: facts[k] for k in ("gpu", "bdf", "rank", "cause", "pid", "process", "pasid", "count")} == {
        "gpu": 6,
        "bdf": "0000:c6:00.0",
        "rank": 2,
        "cause": "page_fault",
        "pid": 12924,
        "process": "pt_main_thread",
        "pasid": 32769,
        "count": 1,
    }
    assert facts["line"] == HEAD.strip() and facts["suspect"] == "application"
    assert "usually the application's bug" in flag.message and "llama rank 2" in flag.message
    now[0] += 30
    with log.open("a") as f:
        f.write(HEAD + PROC + RESET)
    fault, reset = mon.poll(topology, [llama]).flags
    assert dict(fault.extra)["count"] == 2
    assert (dict(reset.extra)["cause"], reset.worker, dict(reset.extra)["rank"]) == ("reset", "llama", 2)
    now[0] += 45  # the page fault was last logged 45 s ago, the reset too: both held (hold 60 s)
    assert len(mon.poll(topology, [llama]).flags) == 2
    now[0] += 20
    assert mon.poll(topology, [llama]).flags == ()
    mon.close()


def test_unreadable_sources_are_said_once_and_nothing_breaks(tmp_path: Path, topology: Topology) -> None:
    told: list[str] = []
    for path in (tmp_path / "missing.log", tmp_path):
        mon = KernelFaultMonitor(path, on_note=told.append)
        first = mon.poll(topology)
        assert first.flags == () and first.new_note is not None and not first.status.available
        second = mon.poll(topology)
        assert second.new_note is None and second.status.note == first.new_note
        mon.close()
    assert told == [
        f"kernel log unavailable (--kernel-log: {tmp_path / 'missing.log'}: no such file or directory): "
        "GPU faults are not watched",
        f"kernel log unavailable (--kernel-log: {tmp_path}: is a directory): GPU faults are not watched",
    ]


def test_journalctl_that_exits_is_reported_once(topology: Topology) -> None:
    false = shutil.which("false")
    assert false is not None
    src = JournalSource(false)  # starts, prints nothing, exits 1: what journalctl does without journal access
    mon = KernelFaultMonitor(source=src)
    notes = []
    for _ in range(50):
        update = mon.poll(topology)
        if update.new_note:
            notes.append(update.new_note)
        if not update.status.available:
            break
        time.sleep(0.05)
    assert notes == ["kernel log unavailable (journalctl -k: exited with status 1): GPU faults are no longer watched"]
    mon.close()


def test_kmsg_is_read_from_where_it_is_then_followed() -> None:
    try:
        src = KmsgSource()
    except SourceUnavailable as exc:
        pytest.skip(f"/dev/kmsg not readable here: {exc}")
    assert src.read() == []  # opened at its end: nothing old
    if not os.access("/dev/kmsg", os.W_OK):
        src.close()
        pytest.skip("/dev/kmsg not writable: cannot log a marker")
    marker = f"amdtop-test marker {uuid.uuid4()}"
    with open("/dev/kmsg", "w") as f:
        f.write(marker + "\n")
    assert any(marker in line for line in src.read())
    src.close()


def test_default_source_order(tmp_path: Path) -> None:
    # No /dev/kmsg at this path: journalctl is next (or, without it, the reason for each).
    try:
        src = open_kernel_source(None, kmsg=tmp_path / "no-kmsg")
    except SourceUnavailable as exc:
        assert "no-kmsg: no such file or directory" in str(exc)
        return
    assert src.name == "journalctl -k"
    src.close()


def test_pipeline_carries_the_flags_and_the_status(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    log.write_text(fixture_lines("nvidia_fallen_off_bus_nvsentinel_155.log"))
    backend = NoneBackend(BackendOptions())
    pipeline = NodePipeline(backend, discover=False, kernel=KernelFaultMonitor(log))
    frame = pipeline.tick()
    pipeline.close()
    doc = frame_json(frame)
    faults = [f for f in doc["flags"] if f["kind"] == "gpu_fault"]
    assert [(f["cause"], f["bdf"], f["gpu"], f["xid"]) for f in faults] == [
        ("fallen_off_bus", "0000:b3:00.0", None, None),
        ("fallen_off_bus", "0000:44:00.0", None, 79),
    ]
    assert doc["kernel_log"] == {"source": str(log), "available": True, "note": None, "lines": 5}


def test_rocr_reports_in_a_workers_log_name_that_worker_and_its_rank(tmp_path: Path) -> None:
    tree = build_mi300x_8(tmp_path / "tree")  # the KFD nodes ROCr's node numbers refer to
    topology = open_backend(BackendOptions(sysfs_root=tree.root)).topology()
    log = tmp_path / "llama.log"
    # An earlier run's hang, then the supervisor's launch line, then this run's output with ROCm/legacy-rocm-build#5259's
    # real lines (KFD node 4 = GPU 2 of the built node).
    earlier = "Memory access fault by GPU node-2 (Agent handle: 0x5640a8bb1980) on address 0x7feea09c5000. Reason: x\n"
    log.write_text(
        earlier
        + "=== amdtop launch llama:2 at 2026-12-02T06:00:00Z: vllm serve /models/llama\n"
        + "INFO 12-02 06:00:05 [api_server.py:1] vLLM API server version 0.11.0\n"
    )
    llama = WorkerStatus("llama", WorkerState.CRASHED, (0, 1, 2, 3), log=str(log))
    kern = tmp_path / "kern.log"
    kern.write_text("")
    mon = KernelFaultMonitor(kern, sysfs_root=tree.root)
    assert mon.poll(topology, [llama]).flags == ()  # the earlier run's fault is not this run's
    with log.open("a") as f:
        f.write(fixture_lines("rocr_hw_exception_rocm_5259.log"))
    (flag,) = mon.poll(topology, [llama]).flags
    facts = dict(flag.extra)
    assert (flag.worker, facts["rank"], facts["gpu"], facts["kfd_node"], facts["cause"], facts["count"]) == (
        "llama",
        2,
        2,
        4,
        "hang",
        4,
    )
    assert "GPU 2 (0000:46:00.0): GPU hang, 4 times (llama rank 2)" in flag.message
    mon.close()


def test_a_reader_that_raises_costs_one_error_line_not_the_tick() -> None:
    class Broken:
        name = "broken"

        def read(self) -> list[str]:
            raise ValueError("bad record")

        def close(self) -> None:
            pass

    pipeline = NodePipeline(NoneBackend(BackendOptions()), discover=False, kernel=KernelFaultMonitor(source=Broken()))
    frame = pipeline.tick()
    pipeline.close()
    assert frame.errors == ("kernel log: bad record",)
    assert frame.snapshot.backend == "none" and frame.kernel_log is None
