"""Issue 23 item 8 in the TUI: a dashboard over a sysfs tree whose files hold non-UTF-8 bytes starts and shows them."""

from __future__ import annotations

from pathlib import Path

from amdtop.telemetry.sysfs import SysfsBackend
from tests.fixtures.sysfs_tree import build_mi300x_8
from tests.tui.conftest import FROZEN, NO_PROC, open_app, settle
from tests.unit.test_undecodable_bytes import poison
from widgets.gpu_table import GpuTable


async def test_dashboard_on_a_poisoned_tree(tmp_path: Path) -> None:
    tree = poison(build_mi300x_8(tmp_path))
    backend = SysfsBackend(tree.root, tree.proc_root, clock=lambda: FROZEN, hostname="fixture")
    app = open_app(backend, autopoll=False, clock=lambda: FROZEN, proc_root=NO_PROC, discover=False, state_dir=NO_PROC)
    async with app.run_test(size=(200, 50)) as pilot:
        frame = app.step(1)
        await settle(pilot)
        assert len(frame.snapshot.gpus) == 8
        assert frame.snapshot.topology.gpus[0].name.endswith("\ufffd\ufffd\ufffd")
        table = app.dashboard.query_one("#pane-gpus", GpuTable)
        assert table.row_count == 8
