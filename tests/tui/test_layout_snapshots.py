"""The dashboard's layout at a large and a small terminal (new layout: history strips, panes sized to content)."""

from __future__ import annotations

from typing import Any

from tests.tui.conftest import make_app, settle
from widgets.gpu_history import NOW_MARK, GpuHistory, spark, sweep

HISTORY_STEPS = 40


async def _history(pilot: Any) -> None:
    await pilot.pause()
    pilot.app.step(HISTORY_STEPS)  # one poll each; the history strips fill from the right
    for _ in range(HISTORY_STEPS - 1):
        pilot.app.step(1)
    await settle(pilot)


def test_layout_200x50(snap_compare: Any) -> None:
    assert snap_compare(make_app(), terminal_size=(200, 50), run_before=_history)


def test_layout_80x24(snap_compare: Any) -> None:
    assert snap_compare(make_app(), terminal_size=(80, 24), run_before=_history)


async def test_history_strips_as_wide_as_the_pane() -> None:
    app = make_app()
    async with app.run_test(size=(200, 50)) as pilot:
        await _history(pilot)
        pane = app.dashboard.query_one("#pane-history", GpuHistory)
        assert pane.display and pane.size.width > 100
        wide = pane.strip_width()
        assert wide >= 25  # three strips share the pane: each far wider than the table's 12-cell column
        lines = [pane.render_line(y).text for y in range(pane.get_content_height(pane.size, pane.size, pane.size.width))]
        assert len(lines) == 8 + 2  # header, one line per GPU, the time axis
        assert f"util ({wide}s per sweep)" in lines[0]  # one column per poll
        # Sweeping: the newest sample sits at the head, marked on the time axis under it.
        head = (pane._pushes - 1) % wide
        strip = lines[1][4 : 4 + wide]
        assert strip[head] != " " and lines[-1][4 + head] == NOW_MARK
        await pilot.resize_terminal(240, 50)
        await settle(pilot)
        assert pane.strip_width() > wide  # wider pane, longer history shown
    async with make_app().run_test(size=(80, 24)) as pilot:
        await _history(pilot)
        assert not pilot.app.dashboard.query_one("#pane-history").display  # 80x24 keeps the tabs


async def test_panes_sized_to_content_logs_take_the_rest() -> None:
    app = make_app()
    async with app.run_test(size=(200, 50)) as pilot:
        await _history(pilot)
        board = app.dashboard
        workers = board.query_one("#pane-workers")
        assert workers.outer_size.height == 3 + 1 + 2  # the demo's three workers, header, border: no empty box
        logs = board.query_one("#pane-logs")
        procs = board.query_one("#pane-procs")
        # The rest of the screen, down to the footer: the Logs and Processes panes each with at least three rows,
        # the Processes pane (more rows to show) first to grow.
        assert logs.region.y == workers.region.bottom and logs.region.bottom == procs.region.y
        assert procs.region.bottom == board.size.height - 1
        assert logs.outer_size.height >= 3 + 2 and procs.outer_size.height >= 1 + 3 + 2
        assert procs.outer_size.height >= logs.outer_size.height
        assert logs.size.width > 190  # the whole width


def test_spark_gaps_and_scale() -> None:
    assert spark([0.0, 50.0, 100.0, None], 6, 100.0) == "  ▁▄█ "
    assert spark([], 3, 100.0) == "   "


def test_sweep_writes_at_the_head_and_keeps_the_last_sweep() -> None:
    assert sweep([10.0, 20.0, 30.0], 5, 3, 100.0) == "▁▂▃  "
    # Seven samples into a 5-column strip: 5 kept, 6 and 7 wrapped to the start over 1 and 2, no gap (the time axis
    # marks the newest column: widgets/gpu_history.now_column).
    assert sweep([float(v) * 10 for v in range(1, 8)], 5, 7, 100.0) == "▅▆▃▄▄"
