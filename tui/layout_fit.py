"""The dashboard's panes measured for :mod:`tui.layout`, and its plan applied to them (offsets and sizes)."""

from __future__ import annotations

from textual.containers import Container
from textual.widget import Widget
from textual.widgets import Log, Static, Tabs

from tui.layout import CHROME, Need, Plan, Rect, Widths
from widgets.gpu_history import GpuHistory
from widgets.log_tail import LogTailPane
from widgets.row_table import RowTable
from widgets.text_pane import TextPane
from widgets.topo_matrix import LEVELS, TopoMatrix

GUTTER = 2
"""The vertical scrollbar's width: text panes are measured as if it were there."""
ROWS = 3
"""Rows every shown pane keeps under its header."""


def need_of(pane: Widget, width: int) -> Need:
    """What ``pane`` has to show at ``width`` cells of content, and its floor (header and three rows)."""
    if isinstance(pane, RowTable):
        # A table wider than the pane scrolls sideways without a scrollbar line (app.tcss): its last columns are the
        # ones meant to go first.
        want = max(1, pane.virtual_size.height)
        return Need(want, min(want, 1 + ROWS))
    if isinstance(pane, TopoMatrix):
        want = pane.lines_at(width)
        return Need(want, want)  # the whole matrix or none of it: a cut matrix reads wrong
    if isinstance(pane, GpuHistory):
        want = pane.get_content_height(pane.size, pane.size, width)
        return Need(want, min(want, 1 + ROWS))
    if isinstance(pane, TextPane):
        # Measured as if beside its scrollbar: a pane planned at its full width, then cut, wraps onto more lines
        # beside the scrollbar that appears, and the plan flipped between two (snapshots differed run to run).
        want = max(1, pane.lines_at(max(1, width - GUTTER)))
        return Need(want, min(want, ROWS))
    if isinstance(pane, LogTailPane):
        summary = pane.query_one("#logs-summary", Static)
        head = summary.get_content_height(summary.size, summary.size, max(1, width - 2))
        # The summary, the status line and room for a few tail lines; the pane takes what is left over beyond that
        # (tui.layout's sink). Not the tail's own count: lines arrive between frames, and the plan would follow them.
        # Lines held back while the tail had no room (LogTailPane.tail_behind) count as lines.
        want = head + 1 + (ROWS if pane.query_one(Log).line_count or pane.tail_behind else 0)
        # Only a tail that follows a worker's log takes what is left (lines come); with no worker it is one line.
        return Need(want, min(want, ROWS), grows=pane.following)  # no header: the summary's lines are its rows
    return Need(1, 1)


def signature(pane: Widget) -> object:
    """What :func:`need_of` reads of ``pane``, at any width: two equal signatures give equal needs at every width, so
    a frame whose panes all kept theirs keeps the plan in place without measuring them again (on the H100 the
    measuring and planning were 7 % of the in-process dashboard's samples, every frame, for a plan that had not
    moved)."""
    if isinstance(pane, RowTable):
        return pane.virtual_size.height
    if isinstance(pane, TopoMatrix):
        return pane.view
    if isinstance(pane, GpuHistory):
        return pane.get_content_height(pane.size, pane.size, 0)  # counts GPUs; the width plays no part
    if isinstance(pane, TextPane):
        return tuple(text.plain for text in pane.view or ())  # how a Text wraps: its characters
    if isinstance(pane, LogTailPane):
        summary = pane.query_one("#logs-summary", Static)
        return summary.content, bool(pane.query_one(Log).line_count), pane.tail_behind, pane.following
    return None


def widths(table: RowTable, matrix: TopoMatrix) -> Widths:
    """What the GPU table and the matrix need across (outer widths)."""
    full = table.virtual_size.width + CHROME
    core = full - table.column_widths()[-1]
    if matrix.view is None or not matrix.is_attached:
        return Widths(full, core, 40, 24)
    return Widths(full, core, matrix.across(1) + CHROME, matrix.across(LEVELS - 1) + CHROME)


def place(widget: Widget, rect: Rect | None) -> None:
    """Show ``widget`` at ``rect`` in the body, or hide it (``None``); unchanged styles are not touched."""
    if rect is None:
        if widget.display:
            widget.display = False
        return
    styles = widget.styles
    if (styles.offset.x.value, styles.offset.y.value) != (rect.x, rect.y):
        styles.offset = (rect.x, rect.y)
    if styles.width is None or styles.width.value != rect.w:
        styles.width = rect.w
    if styles.height is None or styles.height.value != rect.h:
        styles.height = rect.h
    if not widget.display:
        widget.display = True


def apply(body: Container, panes: dict[str, Widget], tabs: Tabs, plan: Plan) -> None:
    """Place every pane and the tab strip of the folded ones as ``plan`` says."""
    for key, pane in panes.items():
        place(pane, plan.rects.get(key))
    place(tabs, plan.tabs)
    if plan.tabs is None or plan.slot_pane is None:
        return
    # Show the folded panes' tabs, make the slot's pane the active one, then hide the rest: hiding the active tab
    # would make Tabs activate another (a pick nobody made).
    for key in plan.folded:
        if tabs.query_one(f"#tab-{key}").has_class("-hidden"):
            tabs.show(f"tab-{key}")
    if tabs.active != f"tab-{plan.slot_pane}":
        tabs.active = f"tab-{plan.slot_pane}"
    for key in panes:
        if key not in plan.folded and not tabs.query_one(f"#tab-{key}").has_class("-hidden"):
            tabs.hide(f"tab-{key}")
