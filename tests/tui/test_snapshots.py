"""SVG snapshots of the dashboard (stored under snapshots/test_snapshots/)."""

from __future__ import annotations

from typing import Any

from tests.tui.conftest import imbalanced_specs, make_app, numa_mismatch_specs
from tests.tui.demo_control import Scenario

STEPS = 6


async def _steps(pilot: Any) -> None:
    await pilot.pause()
    pilot.app.step(STEPS)
    await pilot.pause()


def test_demo_node_80x24(snap_compare: Any) -> None:
    assert snap_compare(make_app(), terminal_size=(80, 24), run_before=_steps)


def test_demo_node_200x50(snap_compare: Any) -> None:
    assert snap_compare(make_app(), terminal_size=(200, 50), run_before=_steps)


def test_tp_imbalance_flagged(snap_compare: Any) -> None:
    assert snap_compare(make_app(specs=imbalanced_specs()), terminal_size=(200, 50), run_before=_steps)


def test_numa_mismatch(snap_compare: Any) -> None:
    assert snap_compare(make_app(specs=numa_mismatch_specs()), terminal_size=(200, 50), run_before=_steps)


def test_lost_gpu(snap_compare: Any) -> None:
    assert snap_compare(make_app(lose=(5,)), terminal_size=(200, 50), run_before=_steps)


def test_pcie_only_4_gpu_node(snap_compare: Any) -> None:
    # A TP-2 group across the two sockets: PCIe between its GPUs and two NUMA nodes, both flagged.
    specs = [Scenario("mistral-7b", (1, 2), 18202, (0.6, 0.58), (40, 40), tuple(range(0, 16)), (0,), 0)]
    assert snap_compare(make_app("pcie-4", specs), terminal_size=(200, 50), run_before=_steps)


def test_empty_node(snap_compare: Any) -> None:
    assert snap_compare(make_app("empty"), terminal_size=(200, 50), run_before=_steps)


def test_help_screen(snap_compare: Any) -> None:
    async def run_before(pilot: Any) -> None:
        await _steps(pilot)
        await pilot.press("question_mark")
        await pilot.pause()

    assert snap_compare(make_app(), terminal_size=(120, 40), run_before=run_before)


def test_stop_confirmation(snap_compare: Any) -> None:
    async def run_before(pilot: Any) -> None:
        await _steps(pilot)
        await pilot.press("5", "s")
        await pilot.pause()

    assert snap_compare(make_app(), terminal_size=(120, 40), run_before=run_before)


def test_readonly_hides_control_keys(snap_compare: Any) -> None:
    assert snap_compare(make_app(readonly=True), terminal_size=(200, 50), run_before=_steps)
