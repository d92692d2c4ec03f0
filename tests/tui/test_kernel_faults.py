"""Kernel faults in the dashboard: a replayed kernel log (``--kernel-log``) tags the faulting GPU in the GPU pane and
lists the fault in the TP groups pane; a node with no GPU backend (``--backend none``) still opens."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from amdtop.logread.kernel.monitor import KernelFaultMonitor
from amdtop.telemetry.base import BackendOptions
from amdtop.telemetry.none_backend import NoneBackend
from tests.tui.conftest import NO_PROC, make_app, open_app, settle
from tui.viewmodel.gpus import gpu_rows
from tui.viewmodel.topology import groups_view

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "kernel"


async def test_replayed_page_fault_tags_its_gpu_and_is_listed() -> None:
    # The simulated MI300X node uses the built tree's PCI addresses: 0000:c6:00.0 is GPU 6.
    mon = KernelFaultMonitor(FIXTURES / "amdgpu_page_fault_split_rocm_amdgpu_172.log")
    app = make_app(kernel_faults=mon)
    async with app.run_test(size=(200, 50)) as pilot:
        await pilot.pause()
        app.step(2)
        await settle(pilot)
        frame = app.pipeline.tick()
        (fault,) = frame.flags_for_gpu(6)
        assert "page fault at 0x0000ae8570611000, 2 times by pt_main_thread pid 12924" in fault.message
        assert "FAULT" in str(gpu_rows(frame)["gpu-6"][6])
        assert any("gpu_fault: GPU 6 (0000:c6:00.0): page fault" in str(line) for line in groups_view(frame))


async def test_dashboard_opens_without_gpus_and_says_once_the_kernel_log_is_missing(tmp_path: Path) -> None:
    mon = KernelFaultMonitor(tmp_path / "missing.log")
    app = open_app(
        NoneBackend(BackendOptions()),
        autopoll=False,
        proc_root=NO_PROC,
        state_dir=NO_PROC,
        discover=False,
        kernel_faults=mon,
    )
    async with app.run_test(size=(160, 40)) as pilot:
        await pilot.pause()
        first = app.step(1)
        await settle(pilot)
        (note,) = first.errors
        assert note.startswith("kernel log unavailable (--kernel-log: ") and "no such file or directory" in note
        assert "kernel log unavailable" in app.status_line(first)
        later = app.step(1)
        assert later.errors == () and later.kernel_log is not None and not later.kernel_log.available
        assert later.snapshot.backend == "none" and later.snapshot.topology.gpus == ()


def test_fault_state_snapshot(snap_compare: Any) -> None:
    """The dashboard with a replayed page fault on GPU 6: the GPU row's FAULT tag, the fault under the TP groups."""
    mon = KernelFaultMonitor(FIXTURES / "amdgpu_page_fault_split_rocm_amdgpu_172.log")

    async def run_before(pilot: Any) -> None:
        await pilot.pause()
        pilot.app.step(6)
        await pilot.pause()

    assert snap_compare(make_app(kernel_faults=mon), terminal_size=(200, 50), run_before=run_before)


async def test_the_header_names_a_gpu_the_bus_holds_and_the_backend_does_not_show(tmp_path: Path) -> None:
    # cli-contract.md: missing_gpus, the header naming them. The simulated node shows its 8 MI300X; the bus holds a
    # ninth, bound to amdgpu (a built sysfs tree; the kernel log is the real capture of ROCm/legacy-rocm-build#4021).
    from amdtop.telemetry.sim import MI300X_BDFS
    from tests.fixtures.sysfs_tree import build_pci_bus, mi300x_on_bus

    root = build_pci_bus(tmp_path, mi300x_on_bus("amdgpu", bdfs=(*MI300X_BDFS, "0000:f5:00.0")))
    mon = KernelFaultMonitor(FIXTURES / "amdgpu_psp_init_failed_mi300x_rocm_4021.log", sysfs_root=root)
    app = make_app(kernel_faults=mon)
    async with app.run_test(size=(200, 50)) as pilot:
        await pilot.pause()
        frame = app.step(1)
        await settle(pilot)
        assert "1 GPU missing: 0000:f5:00.0" in app.status_line(frame)
