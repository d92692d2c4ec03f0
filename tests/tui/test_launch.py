"""tui.launch: no GPU means the simulated node with a banner; the banner shows on the dashboard."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest

from amdtop.cli.common import node_spec
from amdtop.errors import NoGpuFound
from amdtop.runtime.spec import NodeSpec
from amdtop.telemetry.sim import SimBackend
from tests.tui.conftest import make_app, settle
from tui import launch


def _args(tmp_path: Path, **kw: Any) -> argparse.Namespace:
    base = dict(
        backend="auto", sysfs_root=Path("/sys"), demo=False, config=tmp_path / "none.toml", state_dir=tmp_path,
        interval=1.0, readonly=False, seed=0, demo_partition=None,
    )  # fmt: skip
    base.update(kw)
    return argparse.Namespace(**base)


def test_no_gpu_opens_sim_with_banner(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from amdtop.runtime import node as runtime_node

    def no_gpu(_spec: NodeSpec) -> Any:
        raise NoGpuFound("no GPU found")

    monkeypatch.setattr(NodeSpec, "open_backend", no_gpu)
    # an empty sysfs: no accelerator on the bus either (the host's own /sys may hold GPUs that a real backend missed)
    node = runtime_node.open_node(node_spec(_args(tmp_path, sysfs_root=tmp_path)), ui=True)
    try:
        assert isinstance(node.backend, SimBackend) and node.demo is True
        assert node.notes[0] == "No GPU found — showing a simulated 8x MI300X node (--demo)"
        assert node.control is not None  # the demo's workers stand in for the simulated node
    finally:
        node.close()


def test_demo_flag_opens_sim_without_banner(tmp_path: Path) -> None:
    from amdtop.runtime.node import open_node

    node = open_node(node_spec(_args(tmp_path, demo=True)), ui=True)
    try:
        assert isinstance(node.backend, SimBackend) and node.demo is True
        assert launch.NO_GPU_BANNER not in node.notes
    finally:
        node.close()


def test_real_backend_without_profiles_has_no_controller(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from amdtop.runtime import node as runtime_node

    backend = SimBackend()
    backend.name = "sysfs"  # stands in for a real backend: no demo workers, no profile file
    monkeypatch.setattr(NodeSpec, "open_backend", lambda _spec: backend)
    node = runtime_node.open_node(node_spec(_args(tmp_path)), ui=True)
    try:
        assert node.control is None and node.supervisor is None and node.notes == []
    finally:
        node.close()


async def test_banner_and_command_palette() -> None:
    app = make_app(banner=launch.NO_GPU_BANNER)
    async with app.run_test(size=(200, 50)) as pilot:
        await pilot.pause()
        app.step(2)
        await settle(pilot)
        assert "No GPU found" in str(app.dashboard.query_one("#banner").render())
        titles = [c.title for c in app.get_system_commands(app.screen)]
        assert {"Stop", "Restart", "Launch", "Pause"} <= set(titles)
        await pilot.press("ctrl+p")
        await pilot.pause()
        assert app.screen.__class__.__name__ == "CommandPalette"
