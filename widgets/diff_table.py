"""A DataTable that takes whole rows each tick and touches only the cells that changed."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rich.style import Style
from textual.widgets import DataTable
from textual.widgets.data_table import ColumnKey, RowKey


class DiffTable(DataTable[Any]):
    """Rows are keyed (``gpu-3``); :meth:`show` diffs against the last rows and calls ``update_cell`` on changes only.

    A full rebuild happens only when the set or order of row keys changes (a GPU or worker appears or goes away).
    """

    COLUMNS: Sequence[tuple[str, str]] = ()
    """(key, label) of each column."""

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes, cursor_type="row", zebra_stripes=False, show_cursor=True)
        self._rows: dict[str, tuple[Any, ...]] = {}
        self._cells: dict[tuple[Any, Any], tuple[tuple[Any, ...], Any, Any]] = {}
        self.rebuilds = 0
        """How many times the rows were rebuilt (tests assert it stays flat tick after tick)."""

    def on_mount(self) -> None:
        self._ensure_columns()

    def _ensure_columns(self) -> None:
        # A frame can arrive before on_mount ran (the poller starts with the app).
        if not self.columns:
            for key, label in self.COLUMNS:
                self.add_column(label, key=key)

    def show(self, rows: Mapping[str, tuple[Any, ...]]) -> None:
        self._ensure_columns()
        if list(rows) != list(self._rows):
            self._rebuild(rows)
            return
        keys = [key for key, _ in self.COLUMNS]
        for row_key, cells in rows.items():
            old = self._rows[row_key]
            for col, (new_cell, old_cell) in enumerate(zip(cells, old, strict=True)):
                if new_cell != old_cell:
                    # Widening a column relayouts the table: only do it when the text got longer.
                    if len(str(new_cell)) > len(str(old_cell)):
                        self.update_cell(row_key, keys[col], new_cell, update_width=True)
                    else:
                        self._set_cell(row_key, keys[col], new_cell)
        self._rows = dict(rows)

    def _rebuild(self, rows: Mapping[str, tuple[Any, ...]]) -> None:
        self.rebuilds += 1
        self._cells.clear()
        selected = self.selected_key()
        self.clear()
        for row_key, cells in rows.items():
            self.add_row(*cells, key=row_key)
        self._rows = dict(rows)
        if selected in self._rows:
            self.move_cursor(row=list(self._rows).index(selected))

    def _set_cell(self, row_key: str, column_key: str, value: Any) -> None:
        # update_cell() repaints the whole table, and Textual sends every repainted line to the terminal: one changed
        # number cost ~9 lines (~6 KB) per tick. Store the value as update_cell does, then repaint just that cell.
        # Private DataTable state (Textual 8.2.8): tests/tui/test_textual_private.py fails, naming it, if it moves.
        self._data[RowKey(row_key)][ColumnKey(column_key)] = value
        self._update_count += 1  # DataTable's line caches key on it
        self.refresh_coordinate(self.get_cell_coordinate(row_key, column_key))

    def selected_key(self) -> str | None:
        if not self._rows or self.cursor_row < 0 or self.cursor_row >= len(self._rows):
            return None
        return list(self._rows)[self.cursor_row]

    def _render_cell(
        self,
        row_index: int,
        column_index: int,
        base_style: Style,
        width: int,
        cursor: bool = False,
        hover: bool = False,
    ) -> Any:
        # DataTable keys its cell cache on a table-wide update counter, so one update_cell re-renders every visible
        # cell. Keep our own cache keyed on the cell's value instead: unchanged cells reuse their segments.
        if row_index < 0 or column_index < 0:
            return super()._render_cell(row_index, column_index, base_style, width, cursor, hover)
        row_key = self._row_locations.get_key(row_index)
        column_key = self._column_locations.get_key(column_index)
        value = self._data.get(row_key, {}).get(column_key)
        context = (
            base_style,
            width,
            cursor,
            hover,
            self._show_hover_cursor,
            self._pseudo_class_state,
            self.show_cursor,
        )
        hit = self._cells.get((row_key, column_key))
        if hit is not None and hit[0] == context and hit[1] == value:
            return hit[2]
        lines = super()._render_cell(row_index, column_index, base_style, width, cursor, hover)
        self._cells[(row_key, column_key)] = (context, value, lines)
        return lines
