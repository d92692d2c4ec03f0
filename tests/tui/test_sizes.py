"""Every terminal size from 80x24 to 250x70, on the demo's eight GPUs and on one real H200: each shown pane has its
header and three rows (or all it has), the matrix abbreviates instead of cutting cells to ``…``, and no block stays
empty while a pane is cut. Snapshots of each (stored under snapshots/test_sizes/)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.tui.conftest import settle
from tests.tui.nodes import SIZES, fill, node_app
from tui.layout import CHROME, Rect
from tui.layout_fit import need_of
from widgets.log_tail import LogTailPane
from widgets.row_table import RowTable
from widgets.topo_matrix import TopoMatrix

NODES = ("demo", "h200")


@pytest.mark.parametrize("node", NODES)
@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_snapshot(snap_compare: Any, node: str, size: tuple[int, int]) -> None:
    async def run_before(pilot: Any) -> None:
        await fill(pilot, node)

    assert snap_compare(node_app(node), terminal_size=size, run_before=run_before)


def _matrix_text(matrix: TopoMatrix) -> str:
    console = matrix.app.console
    width = matrix.content_size.width
    lines = console.render_lines(matrix.render_at(matrix.view, width), console.options.update_width(width), pad=False)
    return "\n".join("".join(seg.text for seg in line) for line in lines)


def _beside(rects: dict[str, Rect], key: str) -> set[str]:
    """The panes left or right of ``key``'s box that share some of its lines."""
    r = rects[key]
    return {
        k
        for k, o in rects.items()
        if k != key and (o.x >= r.x + r.w or o.x + o.w <= r.x) and o.y < r.y + r.h and r.y < o.y + o.h
    }


@pytest.mark.parametrize("node", (*NODES, "cpx"))
async def test_every_shown_pane_readable_at_every_size(node: str) -> None:
    app = node_app(node)
    async with app.run_test(size=SIZES[0]) as pilot:
        await fill(pilot, node)
        board = app.dashboard
        for size in SIZES:
            await pilot.resize_terminal(*size)
            await settle(pilot)  # the capture holds six polls: the panes keep its last frame
            body = board.query_one("#body")
            plan = board.plan
            cut: list[str] = []
            slack: dict[str, int] = {}
            floored: set[str] = set()
            for key, rect in plan.rects.items():
                pane = board.query_one(f"#pane-{key}")
                where = f"{key} at {size}"
                assert pane.display and pane.region.height == rect.h, where
                assert body.region.contains_region(pane.region), f"{where}: off the screen"
                need = need_of(pane, pane.content_size.width)
                inner = pane.content_size.height
                assert inner >= min(need.want, 1 + 3 if isinstance(pane, RowTable) else 3), f"{where}: {inner} lines"
                if isinstance(pane, RowTable):
                    # Not an empty box: the header and at least three of its rows are on screen.
                    drawn = [pane.render_line(y).text.strip() for y in range(min(inner, 1 + 3))]
                    assert all(drawn[: 1 + min(3, max(1, pane.row_count))]), f"{where}: {drawn}"
                if inner <= need.least:
                    floored.add(key)
                if inner < need.want:
                    cut.append(key)
                elif not isinstance(pane, LogTailPane):  # the log tail's empty lines wait for lines
                    slack[key] = inner - need.want
                if isinstance(pane, TopoMatrix):
                    assert "…" not in _matrix_text(pane), f"{where}: a matrix cell cut"
            # The boxes tile the body: nothing left uncovered, nothing drawn twice.
            area = sum(r.w * r.h for r in plan.rects.values()) + (plan.tabs.w * plan.tabs.h if plan.tabs else 0)
            assert area == body.size.width * body.size.height, size
            if cut:
                # Room sits unused only in blocks smaller than a pane's floor (a header, three rows, a border).
                assert all(extra < 4 + CHROME for extra in slack.values()), (size, cut, slack)
                # And only where it cannot go to the pane that hides rows: a pane has empty lines while another is cut
                # only beside a pane at its floor (the band they share can be no shorter).
                for key, extra in slack.items():
                    if extra:
                        beside = _beside(plan.rects, key)
                        assert beside & floored, (size, key, extra, cut, sorted(beside), sorted(floored))
            for key in plan.folded:
                assert f"tab-{key}" in {t.id for t in board.query("#tabs Tab") if t.display}, (size, key)
