"""Faults to GPU, process, worker and rank: PCI address, KFD node and pasid against built sysfs trees (the real
layout, tests/fixtures/sysfs_tree.py), processes' parents from the real /proc."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from amdtop.logread.kernel.events import FaultCause, KernelEvent
from amdtop.logread.kernel.mapper import FaultMapper
from amdtop.logread.kernel.parser import parse_lines
from amdtop.model import WorkerState, WorkerStatus
from amdtop.telemetry.base import BackendOptions
from amdtop.telemetry.sysfs import open_backend
from tests.fixtures.sysfs_tree import build_mi300x_8, build_mi300x_8_partitioned

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "kernel"


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    return build_mi300x_8(tmp_path_factory.mktemp("mi300x"))


@pytest.fixture(scope="module")
def mapper(tree) -> FaultMapper:  # type: ignore[no-untyped-def]
    topology = open_backend(BackendOptions(sysfs_root=tree.root)).topology()
    return FaultMapper(topology, tree.root, tree.proc_root)


def worker(name: str, gpus: tuple[int, ...], **kw: object) -> WorkerStatus:
    return WorkerStatus(name, WorkerState.READY, gpus, **kw)  # type: ignore[arg-type]


def test_bdf_and_pid_from_the_line_to_gpu_worker_and_rank(mapper: FaultMapper) -> None:
    # ROCm/amdgpu#172: pt_main_thread pid 12924 faulted on 0000:c6:00.0 (GPU 6 of the built MI300X node).
    fault = parse_lines((FIXTURES / "amdgpu_page_fault_split_rocm_amdgpu_172.log").read_text().splitlines()[1:])[0]
    workers = [
        worker("small", (0, 1, 2, 3), rank_pids=((0, 100), (1, 101), (2, 102), (3, 103))),
        worker("llama", (4, 5, 6, 7), rank_pids=((0, 12921), (1, 12922), (2, 12924), (3, 12925))),
    ]
    o = mapper.owner(fault, workers)
    assert (o.gpu, o.bdf, o.pid, o.process, o.worker, o.rank) == (
        6,
        "0000:c6:00.0",
        12924,
        "pt_main_thread",
        "llama",
        2,
    )


def test_pasid_to_process_through_kfd_proc(mapper: FaultMapper, tree) -> None:  # type: ignore[no-untyped-def]
    # The tree's KFD context of pid 4242 (comm python3 in its /proc) has pasid 33010.
    assert (tree.root / "class/kfd/kfd/proc/4242/pasid").read_text().strip() == "33010"
    fault = KernelEvent(FaultCause.PAGE_FAULT, "line", bdf="0000:05:00.0", pasid=33010)
    o = mapper.owner(fault, [worker("llama", (0, 1, 2, 3), pids=(4242,))])
    assert (o.gpu, o.pid, o.process, o.worker, o.rank) == (0, 4242, "python3", "llama", 0)
    gone = mapper.owner(KernelEvent(FaultCause.PAGE_FAULT, "line", bdf="0000:05:00.0", pasid=40000), [])
    assert (gone.gpu, gone.pid) == (0, None)


def test_kfd_node_of_a_rocr_report_to_the_gpu_and_its_worker(mapper: FaultMapper) -> None:
    # "HW Exception by GPU node-4": KFD node 4 is the third GPU node after the two CPU nodes, GPU 2 (0000:46:00.0).
    (hang, *_) = parse_lines((FIXTURES / "rocr_hw_exception_rocm_5259.log").read_text().splitlines()[1:])
    o = mapper.owner(hang, [worker("llama", (0, 1, 2, 3)), worker("qwen", (4, 5))])
    assert (o.gpu, o.bdf, o.pid, o.worker, o.rank) == (2, "0000:46:00.0", None, "llama", 2)


def test_a_process_that_is_no_worker_is_not_blamed_on_the_gpus_worker(mapper: FaultMapper) -> None:
    fault = KernelEvent(FaultCause.PAGE_FAULT, "line", bdf="0000:c6:00.0", pid=999_999, process="stray")
    o = mapper.owner(fault, [worker("llama", (4, 5, 6, 7), pids=(1234,))])
    assert (o.gpu, o.pid, o.worker, o.rank) == (6, 999_999, None, None)


def test_a_stopped_worker_owns_nothing(mapper: FaultMapper) -> None:
    stopped = WorkerStatus("old", WorkerState.STOPPED, (0,))
    o = mapper.owner(KernelEvent(FaultCause.RESET, "line", bdf="0000:05:00.0"), [stopped])
    assert (o.gpu, o.worker) == (0, None)


def test_unknown_device_keeps_its_address(mapper: FaultMapper) -> None:
    o = mapper.owner(KernelEvent(FaultCause.UNCORRECTABLE, "line", bdf="0000:1c:00.0"), [])
    assert (o.gpu, o.bdf) == (None, "0000:1c:00.0")


def test_a_child_of_a_worker_process_is_the_workers(mapper: FaultMapper) -> None:
    # A real child of this process: the worker lists only its parent; the mapper walks /proc/<pid>/stat upwards.
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        real = FaultMapper(mapper.topology, mapper.sysfs_root, Path("/proc"))
        fault = KernelEvent(FaultCause.PAGE_FAULT, "line", bdf="0000:85:00.0", pid=child.pid)
        o = real.owner(fault, [worker("qwen", (4, 5), pids=(os.getpid(),))])
        assert (o.gpu, o.worker, o.rank) == (4, "qwen", 0)
    finally:
        child.kill()
        child.wait()


def test_partitioned_node_kfd_node_and_partition_function(tmp_path: Path) -> None:
    tree = build_mi300x_8_partitioned(tmp_path, "CPX", "NPS4")
    topology = open_backend(BackendOptions(sysfs_root=tree.root)).topology()
    m = FaultMapper(topology, tree.root, tree.proc_root)
    # CPX: GPU 1's partitions are KFD nodes 10-17 and HIP devices 8-15; a worker on HIP 8-15 has rank r on partition r.
    w = worker("cpx", tuple(range(8, 16)))
    o = m.owner(KernelEvent(FaultCause.HANG, "line", kfd_node=11), [w])
    assert (o.gpu, o.partition, o.bdf, o.worker, o.rank) == (1, 1, "0000:26:00.0", "cpx", 1)
    # A VM fault names the partition's PCI function.
    o = m.owner(KernelEvent(FaultCause.PAGE_FAULT, "line", bdf="0000:26:00.3"), [w])
    assert (o.gpu, o.partition, o.worker, o.rank) == (1, 3, "cpx", 3)


def test_xid_on_a_real_two_h200_topology(tmp_path: Path) -> None:
    from amdtop.telemetry.nvml import NvmlBackend
    from amdtop.telemetry.nvml_replay import ReplayNvml, load_fixture, materialize

    fixture = load_fixture(Path(__file__).resolve().parents[1] / "fixtures" / "nvml" / "h200x2_replay.json")
    sysfs, proc = materialize(fixture, tmp_path)
    backend = NvmlBackend(ReplayNvml(fixture), BackendOptions(sysfs_root=sysfs, proc_root=proc))
    topology = backend.topology()
    bus = topology.gpus[1].bdf.rpartition(".")[0]  # Xid lines print the bus without the function
    # The real Xid 79 line of NVIDIA/NVSentinel#155 with this capture's bus in it (built: no capture has both).
    real = (FIXTURES / "nvidia_fallen_off_bus_nvsentinel_155.log").read_text().splitlines()[-1]
    (fault,) = parse_lines([real.replace("0000:44:00", bus)])
    o = FaultMapper(topology, sysfs, proc).owner(fault, [worker("tp2", (0, 1))])
    assert (o.gpu, o.bdf, o.worker, o.rank) == (1, topology.gpus[1].bdf, "tp2", 1)
    assert fault.cause is FaultCause.FALLEN_OFF_BUS
