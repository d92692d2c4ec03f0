"""A node whose GPUs are on the PCI bus but failed driver init opens a screen that says so (SVG snapshot), built from
a sysfs tree with no driver bound and the real kernel lines of ROCm/legacy-rocm-build#4021; never the demo."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from amdtop.pcibus import GpusFailedInit
from tests.fixtures.sysfs_tree import MI300X_BDFS, build_pci_bus, mi300x_on_bus
from tests.unit.test_pci_bus import _args
from tui.failed_gpus import FailedGpusApp


def _incident(tmp_path: Path) -> Any:
    from amdtop import runtime

    with pytest.raises(GpusFailedInit) as info:
        # the capture's failed GPU (0000:1b:00.0) first: its own lines name it
        bus = mi300x_on_bus(bdfs=("0000:1b:00.0", *MI300X_BDFS[1:]))
        runtime.open(_args(tmp_path, build_pci_bus(tmp_path, bus)), ui=True)
    return info.value.incident


def test_failed_gpus_screen(snap_compare: Any, tmp_path: Path) -> None:
    assert snap_compare(FailedGpusApp(_incident(tmp_path)), terminal_size=(140, 30))


async def test_failed_gpus_screen_says_so_and_quits(tmp_path: Path) -> None:
    app = FailedGpusApp(_incident(tmp_path))
    async with app.run_test(size=(140, 30)) as pilot:
        await pilot.pause()
        body = str(app.query_one("#failed").render())
        assert "The GPUs failed to come up" in body and "8 AMD GPUs on the PCI bus failed driver init" in body
        assert "simulated" not in body
        await pilot.press("q")
    assert app.return_value == 1


def test_header_says_gpus_on_the_bus_failed_to_come_up() -> None:
    from amdtop.logread.kernel.monitor import KernelLogStatus
    from amdtop.pcibus import PciAccelerator, verdict
    from amdtop.pipeline import NodeFrame
    from amdtop.telemetry.sim import SimBackend
    from tests.tui.conftest import make_app

    missing = [PciAccelerator(MI300X_BDFS[7], "AMD", "0x74a1", 0x120000, "amdgpu")]
    inc = verdict(missing, {})
    assert inc is not None
    frame = NodeFrame(SimBackend().sample(), kernel_log=KernelLogStatus("/dev/kmsg", True, incidents=(inc,)))
    line = make_app().status_line(frame)
    assert "1 incident" in line
    assert "1 AMD GPU on the PCI bus is not shown by the backend" in line
