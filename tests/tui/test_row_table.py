"""RowTable: the keyed line-API table under the GPU and workers panes (cursor, keys, clicks, changed-cell repaint)."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.app import App, ComposeResult
from textual.geometry import Region

from widgets.row_table import RowTable
from widgets.segments import cell_key


class Table(RowTable):
    COLUMNS = (("name", "Name"), ("value", "Value"))


class TableApp(App[None]):
    CSS = "Table { height: 6; }"

    def __init__(self) -> None:
        super().__init__()
        self.highlighted: list[str] = []

    def compose(self) -> ComposeResult:
        yield Table(id="t")

    def on_row_table_row_highlighted(self, message: RowTable.RowHighlighted) -> None:
        self.highlighted.append(message.row_key)


def rows(n: int, value: Any = "1") -> dict[str, tuple[Any, ...]]:
    return {f"r{i}": (f"row {i}", value) for i in range(n)}


async def test_keys_click_and_highlight_messages() -> None:
    app = TableApp()
    async with app.run_test(size=(40, 10)) as pilot:
        table = app.query_one(Table)
        table.show(rows(20))
        table.focus()
        await pilot.pause()
        assert table.selected_key() == "r0" and table.row_count == 20
        await pilot.press("down", "down")
        await pilot.pause()
        assert table.selected_key() == "r2" and app.highlighted == ["r1", "r2"]
        await pilot.press("end")
        await pilot.pause()
        assert table.selected_key() == "r19"
        # Five rows fit under the header: the last row is scrolled into view.
        assert table.scroll_offset.y == 20 - 5
        assert table.render_line(5).text.strip().startswith("row 19")
        assert table.render_line(0).text.split() == ["Name", "Value"]  # the header stays on top
        await pilot.press("home")
        await pilot.pause()
        assert table.selected_key() == "r0" and table.scroll_offset.y == 0
        await pilot.click(Table, offset=(3, 4))  # the fourth data row (header, border-less)
        await pilot.pause()
        assert table.selected_key() == "r3" and app.highlighted[-1] == "r3"


async def test_same_rows_keep_the_cursor_and_count_no_rebuild() -> None:
    app = TableApp()
    async with app.run_test(size=(40, 10)) as pilot:
        table = app.query_one(Table)
        table.show(rows(4))
        table.move_cursor(row=2)
        before = table.rebuilds
        table.show(rows(4, "2"))
        assert table.rebuilds == before and table.selected_key() == "r2"
        shown = dict(rows(4))
        del shown["r0"]  # a worker went away: rows rebuilt, the selected one stays selected
        table.show(shown)
        await pilot.pause()
        assert table.rebuilds == before + 1 and table.selected_key() == "r2" and table.cursor_row == 1


async def test_changed_cells_repaint_only_their_cells_and_style_changes_count() -> None:
    app = TableApp()
    async with app.run_test(size=(40, 10)) as pilot:
        table = app.query_one(Table)
        table.show({"a": ("gpu 0", Text("12%", style="green")), "b": ("gpu 1", Text("13%", style="green"))})
        await pilot.pause()
        seen: list[tuple[Region, ...]] = []
        real = table.refresh

        def spy(*regions: Region, **kw: Any) -> Any:
            seen.append(regions)
            return real(*regions, **kw)

        table.refresh = spy  # type: ignore[method-assign]
        # Same text, new style (a GPU turning red): Text.__eq__ ignores the style, the table does not.
        assert Text("12%", style="green") == Text("12%", style="red")
        assert cell_key(Text("12%", style="green")) != cell_key(Text("12%", style="red"))
        table.show({"a": ("gpu 0", Text("12%", style="red")), "b": ("gpu 1", Text("13%", style="green"))})
        assert len(seen) == 1 and len(seen[0]) == 1
        (region,) = seen[0]
        # Column "value" of row "a": x after "Name" (5 cells + padding), line 1 (under the header), one line.
        assert (region.x, region.y, region.height) == (len(" gpu 0 "), 1, 1)
        await pilot.pause()
        red = [seg for seg in table.render_line(1) if seg.text.strip() == "12%"]
        assert red and red[0].style is not None and red[0].style.color is not None
        assert red[0].style.color.name == "red"


class PaneApp(App[None]):
    def compose(self) -> ComposeResult:
        from widgets.text_pane import TextPane

        yield TextPane(id="p")


async def test_text_pane_repaints_lines_that_moved_or_restyled() -> None:
    from widgets.text_pane import TextPane

    app = PaneApp()
    async with app.run_test(size=(20, 10)) as pilot:
        pane = app.query_one(TextPane)
        long = "x" * 30  # two lines at width 18 (20 less the scrollbar's gutter, kept whether it shows or not)
        pane.view = (Text("a"), Text("b"), Text(long))
        await pilot.pause()
        assert pane.scrollable_content_region.width == 18
        assert [pane.render_line(y).text.strip() for y in range(4)] == ["a", "b", "x" * 18, "x" * 12]
        seen: list[int] = []
        real = pane.refresh

        def spy(*regions: Region, **kw: Any) -> Any:
            seen.extend(r.y for r in regions)
            return real(*regions, **kw)

        pane.refresh = spy  # type: ignore[method-assign]
        # Same number of lines: "a" grows to two, the long one shrinks to one; "b" moves down a line unchanged.
        pane.view = (Text(long), Text("b"), Text("c"))
        assert sorted(seen) == [0, 1, 2, 3]
        seen.clear()
        pane.view = (Text(long), Text("b", style="red"), Text("c"))  # a style-only change repaints its line
        assert seen == [2]
        seen.clear()
        pane.view = (Text(long), Text("b", style="red"), Text("c"))
        assert seen == []
        # Lines that read as the ones drawn (a pane rebuilt from each frame): not wrapped or matched again.
        builds: list[int] = []
        build = pane._build
        pane._build = lambda width, looks=None: builds.append(width) or build(width, looks)  # type: ignore[method-assign]
        pane.view = pane.view
        pane.view = (Text(long), Text("b", style="red"), Text("c"))
        pane.view = (Text(long), Text.assemble(("b", "red")), Text("c"))  # the same characters: a span, not a style
        assert builds == [18] and seen == [2]
        seen.clear()
        builds.clear()
        pane.view = (Text(long), Text.assemble(("b", "red")), Text("d"))  # a character
        assert builds == [18] and seen == [3]


class BorderedApp(App[None]):
    CSS = "Table { height: 8; border: round white; }"

    def compose(self) -> ComposeResult:
        yield Table(id="t")


async def test_a_new_subtitle_repaints_the_bottom_border_row_only() -> None:
    """Issue 53 (session 25): the Processes pane's "read HH:MM:SSZ" stamp changes every 3 s. Textual's
    ``border_subtitle`` refreshes the whole widget (every line rendered again for the stamp's cells);
    :meth:`RowTable.set_subtitle` marks the bottom border row only, and the screen shows the new subtitle."""
    app = BorderedApp()
    async with app.run_test(size=(60, 12)) as pilot:
        table = app.query_one(Table)
        table.show(rows(4))
        table.set_subtitle("read 10:00:00Z")
        await pilot.pause()
        assert table.border_subtitle == "read 10:00:00Z"
        table.set_subtitle("read 10:00:03Z")
        outer = table.outer_size
        assert table._repaint_regions == {Region(0, outer.height - 1, outer.width, 1)}
        await pilot.pause()
        bottom = table.render_lines(Region(0, outer.height - 1, outer.width, 1))[0]  # through the styles cache
        assert "read 10:00:03Z" in "".join(s.text for s in bottom)
        table.set_subtitle("read 10:00:03Z")  # unchanged: nothing marked
        assert not table._repaint_regions
