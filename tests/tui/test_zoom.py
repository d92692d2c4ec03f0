"""A pane key pressed twice shows that pane over the whole body (k9s-style); again, or escape, brings the layout
back. The Processes view zoomed keeps its keys."""

from __future__ import annotations

from typing import Any

from tests.tui.nodes import fill, node_app
from widgets.processes_table import ProcessesTable


async def _zoom_procs(pilot: Any) -> None:
    await fill(pilot)
    await pilot.press("7", "7")
    await pilot.pause()


def test_snapshot_zoomed_processes(snap_compare: Any) -> None:
    assert snap_compare(node_app("demo"), terminal_size=(120, 40), run_before=_zoom_procs)


async def test_pane_key_twice_zooms_and_back() -> None:
    app = node_app("demo")
    async with app.run_test(size=(160, 45)) as pilot:
        await fill(pilot)
        board = app.dashboard
        body = board.query_one("#body")
        procs = board.query_one("#pane-procs", ProcessesTable)
        await pilot.press("7")
        await pilot.pause()
        assert procs.has_focus and board.zoomed is None and procs.region.height < body.region.height
        await pilot.press("7")
        await pilot.pause()
        assert board.zoomed == "procs" and procs.region == body.region
        assert "zoomed" in str(procs.border_title)
        shown = [key for key in board.plan.rects]
        assert shown == ["procs"] and not board.query_one("#pane-gpus").display
        # All its rows fit now (the demo's seven GPUs with a process: a row and a total each).
        assert procs.content_size.height >= procs.row_count + 1
        # The zoomed view keeps its keys (o sorts; signals: tests/tui/test_processes_pane.py).
        before = procs.sort
        await pilot.press("o")
        await pilot.pause()
        assert procs.sort != before and procs.sort_label in str(procs.border_subtitle)
        # t: the processes under their owners (a row per owner over its processes), and back.
        rows = procs.row_count
        await pilot.press("t")
        await pilot.pause()
        owners = [k for k in procs._keys if k.startswith("o-")]
        assert procs.by_worker and owners and procs._keys[0] == owners[0]
        assert not any(k.startswith("t-") for k in procs._keys) and "by worker" in str(procs.border_subtitle)
        await pilot.press("t")
        await pilot.pause()
        assert not procs.by_worker and procs.row_count == rows
        await pilot.press("7")  # the same key again: back to the layout
        await pilot.pause()
        assert board.zoomed is None and board.query_one("#pane-gpus").display
        await pilot.press("5", "5")
        await pilot.pause()
        assert board.zoomed == "workers"
        await pilot.press("2")  # another pane's key while zoomed: that pane, zoomed
        await pilot.pause()
        assert board.zoomed == "topo"
        await pilot.press("escape")
        await pilot.pause()
        assert board.zoomed is None and procs.display


async def test_folded_pane_key_shows_it_in_the_tab_slot() -> None:
    app = node_app("demo")
    async with app.run_test(size=(80, 24)) as pilot:
        await fill(pilot)
        board = app.dashboard
        assert "numa" in board.plan.folded
        await pilot.press("4")
        await pilot.pause()
        assert board.plan.slot_pane == "numa" and board.query_one("#pane-numa").display
        assert board.query_one("#pane-numa").region.height >= 5
