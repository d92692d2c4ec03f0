"""A keyed table drawn through Textual's line API: each tick repaints only the rows whose cells changed.

Textual's ``DataTable`` renders every cell through Rich (padding, wrapping, cropping) and keys its caches on one
table-wide counter, so one changed number re-renders the table: on the dashboard that was the largest share of its
CPU (docs/benchmarks.md). Here a row is one cached :class:`~textual.strip.Strip`, rebuilt from its cells' segments
when a cell of that row changes, and only that line is refreshed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from rich.cells import cell_len
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual import events
from textual.binding import Binding, BindingType
from textual.geometry import Region, Size
from textual.message import Message
from textual.scroll_view import ScrollView
from textual.strip import Strip

from widgets.segments import cell_key, text_segments

PAD = 1
"""Blank cells each side of a cell (as DataTable's ``cell_padding``)."""


def _plain(cell: object) -> str:
    return cell.plain if isinstance(cell, Text) else str(cell)


class RowTable(ScrollView, can_focus=True):
    """Rows are keyed (``gpu-3``); :meth:`show` takes all rows each tick and repaints the changed ones.

    A header line stays on top; a cursor selects a row (arrows, page keys, home/end, a click) and posts
    :class:`RowHighlighted`. Columns are as wide as their widest cell and only grow, so a changed number never moves
    the columns after it; they are measured afresh when the set of rows changes.
    """

    COLUMNS: ClassVar[Sequence[tuple[str, str]]] = ()
    """(key, label) of each column."""

    COMPONENT_CLASSES: ClassVar[set[str]] = {"row-table--header", "row-table--cursor"}
    DEFAULT_CSS = """
    RowTable {
        background: $surface;
        color: $foreground;
        height: auto;
        max-height: 100%;
        & > .row-table--header { text-style: bold; background: $panel; color: $foreground; }
        & > .row-table--cursor {
            background: $block-cursor-blurred-background;
            color: $block-cursor-blurred-foreground;
            text-style: $block-cursor-blurred-text-style;
        }
        &:focus {
            background-tint: $foreground 5%;
            & > .row-table--cursor {
                background: $block-cursor-background;
                color: $block-cursor-foreground;
                text-style: $block-cursor-text-style;
            }
            & > .row-table--header { background-tint: $foreground 5%; }
        }
    }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("up", "cursor(-1)", "Cursor up", show=False),
        Binding("down", "cursor(1)", "Cursor down", show=False),
        Binding("pageup", "page(-1)", "Page up", show=False),
        Binding("pagedown", "page(1)", "Page down", show=False),
        Binding("home,ctrl+home", "cursor_to(0)", "Top", show=False),
        Binding("end,ctrl+end", "cursor_to(-1)", "Bottom", show=False),
        Binding("left", "scroll_left", "Scroll left", show=False),
        Binding("right", "scroll_right", "Scroll right", show=False),
    ]

    class RowHighlighted(Message):
        """The cursor moved onto a row."""

        def __init__(self, table: RowTable, cursor_row: int, row_key: str) -> None:
            super().__init__()
            self.table = table
            self.cursor_row = cursor_row
            self.row_key = row_key

        @property
        def control(self) -> RowTable:
            return self.table

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self._rows: dict[str, tuple[Any, ...]] = {}
        self._keys: list[str] = []
        self._widths: list[int] = [cell_len(label) for _, label in self.COLUMNS]
        self._looks: dict[str, tuple[object, ...]] = {}
        """Row key -> :func:`cell_key` of each cell, to find the cells that changed."""
        self._cells: dict[tuple[object, int, Style], list[Segment]] = {}
        self._lines: dict[str, tuple[tuple[object, ...], bool, tuple[int, int], Strip]] = {}
        """Row key -> (looks, cursor, (width, scroll x), strip) last drawn; rebuilt when any of the first three change."""
        self._header: tuple[tuple[int, int], Strip] | None = None
        self._styles: dict[str, Style] = {}
        """Base, header and cursor styles: resolving one walks the DOM (~20 us), and each line needs one."""
        self.cursor_row = 0
        self.empty_text = ""
        """Shown under the header while there are no rows: what would fill the table, and how."""
        self.rebuilds = 0
        """How many times the set or order of rows changed (tests assert it stays flat tick after tick)."""
        self._border_row_only = False
        """Set while :meth:`set_subtitle` assigns: the descriptor's ``refresh()`` then repaints the bottom row only."""

    # -- data --------------------------------------------------------------------------------------------------------
    @property
    def row_count(self) -> int:
        return len(self._keys)

    def get_row(self, key: str) -> tuple[Any, ...]:
        return self._rows[key]

    def selected_key(self) -> str | None:
        if not self._keys or not 0 <= self.cursor_row < len(self._keys):
            return None
        return self._keys[self.cursor_row]

    def show(self, rows: Mapping[str, tuple[Any, ...]]) -> None:
        keys = list(rows)
        looks = {key: tuple(cell_key(c) for c in cells) for key, cells in rows.items()}
        if keys != self._keys:
            self.rebuilds += 1
            selected = self.selected_key()
            self._keys = keys
            self._rows = dict(rows)
            self._looks = looks
            self._widths = [cell_len(label) for _, label in self.COLUMNS]
            self._lines.clear()
            self._grow(self._rows.values())
            self.cursor_row = (
                keys.index(selected)
                if selected is not None and selected in rows
                else min(self.cursor_row, max(0, len(keys) - 1))
            )
            self._resize()
            self.refresh()
            return
        changed = [(row, key) for row, key in enumerate(keys) if looks[key] != self._looks[key]]
        previous, self._looks = self._looks, looks
        self._rows = dict(rows)
        if not changed:
            return
        if self._grow(rows[key] for _, key in changed):
            self._lines.clear()
            self._resize()
            self.refresh()
            return
        # Repaint the changed cells only: over SSH a tick then carries those cells, not whole rows.
        x = -round(self.scroll_offset.x)
        starts = []
        for width in self._widths:
            starts.append(x)
            x += width + 2 * PAD
        top = 1 - round(self.scroll_offset.y)
        regions: list[Region] = []
        for row, key in changed:
            y = row + top
            run: list[int] = []  # adjacent changed columns: one region (fewer regions, same cells on the wire)
            for col, (new, old) in enumerate(zip(looks[key], previous[key], strict=True)):
                if new != old and col < len(starts):
                    run.append(col)
                    continue
                if run:
                    regions.append(self._run_region(run, starts, y))
                    run = []
            if run:
                regions.append(self._run_region(run, starts, y))
        self.refresh(*regions)  # one call: each refresh() call costs more than the region it adds

    def _run_region(self, run: list[int], starts: list[int], y: int) -> Region:
        end = starts[run[-1]] + self._widths[run[-1]] + 2 * PAD
        return Region(starts[run[0]], y, end - starts[run[0]], 1)

    def _grow(self, rows: Any) -> bool:
        """Widen columns to fit ``rows``; True when one grew."""
        grew = False
        for cells in rows:
            for col, cell in enumerate(cells[: len(self._widths)]):
                width = cell_len(_plain(cell))
                if width > self._widths[col]:
                    self._widths[col] = width
                    grew = True
        if grew:
            self._header = None
        return grew

    def column_widths(self) -> tuple[int, ...]:
        """Each column's width on screen, its padding included."""
        return tuple(w + 2 * PAD for w in self._widths)

    def _row_width(self) -> int:
        return sum(self._widths) + 2 * PAD * len(self._widths)

    def set_empty_text(self, text: str) -> None:
        """The line shown while the table has no rows."""
        if text != self.empty_text:
            self.empty_text = text
            self._resize()
            self.refresh()

    def _resize(self) -> None:
        lines = len(self._keys) or (1 if self.empty_text else 0)
        size = Size(self._row_width(), lines + 1)
        if size != self.virtual_size:
            self.virtual_size = size
            self.refresh(layout=True)

    def set_subtitle(self, text: str) -> None:
        """Put ``text`` in the bottom border, repainting that row and no other.

        Textual's ``border_subtitle`` descriptor refreshes the whole widget: the Processes pane's "read HH:MM:SSZ"
        stamp, new every 3 s, re-rendered all its lines (26 at 200x50) through the styles cache for the twenty cells
        that changed: on an idle GPU that was as much of the dashboard's frame as the history (docs/benchmarks.md,
        issue 53 session 25)."""
        if (self.border_subtitle or "") == text:
            return
        self._border_row_only = True
        try:
            self.border_subtitle = text  # the descriptor stores it, then calls refresh() below
        finally:
            self._border_row_only = False

    def refresh(
        self, *regions: Region, repaint: bool = True, layout: bool = False, recompose: bool = False
    ) -> RowTable:
        if self._border_row_only and not regions and not layout and not recompose:
            # Regions are in content coordinates: the bottom border is the outer box's last row.
            outer, offset = self.outer_size, self.content_offset
            regions = (Region(-offset.x, outer.height - 1 - offset.y, outer.width, 1),)
        return super().refresh(*regions, repaint=repaint, layout=layout, recompose=recompose)

    # -- drawing -----------------------------------------------------------------------------------------------------
    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._forget_styles()

    def _forget_styles(self) -> None:
        self._lines.clear()
        self._cells.clear()
        self._header = None
        self._styles.clear()

    def on_focus(self, event: events.Focus) -> None:
        self._forget_styles()
        self.refresh()

    def on_blur(self, event: events.Blur) -> None:
        self._forget_styles()
        self.refresh()

    def _style(self, part: str) -> Style:
        style = self._styles.get(part)
        if style is None:
            style = self.rich_style
            if part:
                style += self.get_component_rich_style(part)
            self._styles[part] = style
        return style

    def _cell(self, cell: Any, width: int, base: Style) -> list[Segment]:
        """A cell's padded segments, styled on ``base``; unchanged cells (most of a row) are looked up."""
        key = (cell_key(cell), width, base)
        hit = self._cells.get(key)
        if hit is not None:
            return hit
        if len(self._cells) > 4096:
            self._cells.clear()
        text = cell if isinstance(cell, Text) else Text(str(cell))
        pad = Segment(" " * PAD)
        body = Segment.adjust_line_length(text_segments(text, self.app.console), width)
        segments = list(Segment.apply_style([pad, *(seg for seg in body if seg.text), pad], base))
        self._cells[key] = segments
        return segments

    def _strip(self, cells: Sequence[Any], base: Style) -> Strip:
        # Each cell is exactly its column's width plus padding: the row's length is known, not measured.
        segments: list[Segment] = []
        for col, width in enumerate(self._widths):
            segments.extend(self._cell(cells[col] if col < len(cells) else "", width, base))
        # Joined runs of one style: each segment is written with its own style codes (it was +25 % tty bytes).
        return Strip(segments, self._row_width()).simplify()

    def _fit(self, strip: Strip, base: Style) -> Strip:
        """``strip`` scrolled and cut or padded to the pane's width."""
        width, x = self.size.width, round(self.scroll_offset.x)
        if x or strip.cell_length > width:
            strip = strip.crop(x, x + width)
        return strip.extend_cell_length(width, base) if strip.cell_length < width else strip

    def _header_strip(self) -> Strip:
        fit = (self.size.width, round(self.scroll_offset.x))
        if self._header is None or self._header[0] != fit:
            base = self._style("row-table--header")
            self._header = (fit, self._fit(self._strip([label for _, label in self.COLUMNS], base), base))
        return self._header[1]

    def _row_strip(self, index: int) -> Strip:
        key = self._keys[index]
        look = self._looks[key]
        cursor = index == self.cursor_row
        fit = (self.size.width, round(self.scroll_offset.x))
        hit = self._lines.get(key)
        if hit is not None and hit[0] == look and hit[1] == cursor and hit[2] == fit:
            return hit[3]
        base = self._style("row-table--cursor" if cursor else "")
        strip = self._fit(self._strip(self._rows[key], base), self._style(""))
        self._lines[key] = (look, cursor, fit, strip)
        return strip

    def render_line(self, y: int) -> Strip:
        if y == 0:
            return self._header_strip()
        index = y - 1 + round(self.scroll_offset.y)
        if not self._keys and index == 0 and self.empty_text:
            note = Text(" " * PAD + self.empty_text, style="italic")
            base = self._style("")
            return self._fit(Strip(list(Segment.apply_style(text_segments(note, self.app.console), base))), base)
        if not 0 <= index < len(self._keys):
            return Strip.blank(self.size.width, self._style(""))
        return self._row_strip(index)

    # -- cursor ------------------------------------------------------------------------------------------------------
    def move_cursor(self, *, row: int) -> None:
        if not self._keys:
            return
        row = max(0, min(len(self._keys) - 1, row))
        if row == self.cursor_row:
            return
        old, self.cursor_row = self.cursor_row, row
        self.refresh_line(old + 1)
        self.refresh_line(row + 1)
        self._scroll_to_cursor()
        self.post_message(self.RowHighlighted(self, row, self._keys[row]))

    def _scroll_to_cursor(self) -> None:
        visible = max(1, self.scrollable_content_region.height - 1)  # below the header
        top = round(self.scroll_offset.y)
        if self.cursor_row < top:
            self.scroll_to(y=self.cursor_row, animate=False)
        elif self.cursor_row >= top + visible:
            self.scroll_to(y=self.cursor_row - visible + 1, animate=False)

    def action_cursor(self, step: int) -> None:
        self.move_cursor(row=self.cursor_row + step)

    def action_page(self, direction: int) -> None:
        self.move_cursor(row=self.cursor_row + direction * max(1, self.scrollable_content_region.height - 1))

    def action_cursor_to(self, row: int) -> None:
        self.move_cursor(row=row if row >= 0 else len(self._keys) - 1)

    def on_click(self, event: events.Click) -> None:
        offset = event.get_content_offset(self)
        if offset is None or offset.y == 0:
            return
        self.move_cursor(row=offset.y - 1 + round(self.scroll_offset.y))
