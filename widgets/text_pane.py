"""A pane of Text lines drawn through the line API: a tick repaints the lines that changed, not the pane."""

from __future__ import annotations

from typing import Any

from rich.style import Style
from rich.text import Text
from textual import events
from textual.geometry import Region, Size
from textual.reactive import reactive
from textual.scroll_view import ScrollView
from textual.strip import Strip

from widgets.segments import cell_key, text_segments


class TextPane(ScrollView):
    """Assign ``view`` a tuple of :class:`~rich.text.Text`; each wraps to the pane's width.

    A Static re-renders its whole renderable (and here also measured it, to know its wrapped height) on every change;
    the TP groups pane changes every tick (its spreads move). This keeps the wrapped strips of each Text and rebuilds
    only the Texts that differ from the last view, then refreshes just their lines; the layout is redone only when
    the number of lines changes.
    """

    DEFAULT_CSS = """
    /* wrapped to its width: a horizontal scrollbar would only be a stray row. The vertical scrollbar's gutter is kept
       whether or not it shows: without it a pane whose lines just fit at its full width but not at the width less the
       scrollbar had two stable layouts (wrap wide, no bar; wrap narrow, bar), and which one it drew depended on the
       order events came in (the DP and 160x45 snapshots that failed under load). */
    TextPane { height: auto; overflow-x: hidden; scrollbar-gutter: stable; }
    """

    view: reactive[tuple[Text, ...] | None] = reactive(None, always_update=True, repaint=False)
    """The lines drawn; lines that look the same (:func:`cell_key`: text, style, spans) are not repainted. No
    ``repaint``: the reactive's own repaint is the whole pane, every tick; :meth:`watch_view` refreshes the lines."""

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self._width = 0
        self._items: list[tuple[object, list[Strip]]] = []
        """Per Text of the view: its :func:`cell_key` and its wrapped strips at ``_width``."""
        self._strips: list[Strip] = []
        self._base: Style | None = None

    def render_view(self, view: Any) -> Any:
        """The view as one renderable (for tests that print what the pane shows)."""
        from rich.console import Group

        return Group(*view) if view else ""

    def _wrap(self, text: Text, width: int) -> list[Strip]:
        console = self.app.console
        if "\n" not in text.plain and "\t" not in text.plain and text.cell_len <= width:
            return [Strip(text_segments(text, console))]  # fits: Rich's wrap costs ~0.1 ms a Text
        return [Strip(text_segments(line, console)) for line in text.wrap(console, max(1, width))]

    def lines_at(self, width: int) -> int:
        """Lines the view takes wrapped at ``width`` (the layout asks before it places the pane)."""
        view = self.view or ()
        if width == self._width:
            return len(self._strips)
        key = (id(view), width)
        if self._measured is None or self._measured[0] != key:
            self._measured = (key, sum(len(self._wrap(text, width)) for text in view))
        return self._measured[1]

    _measured: tuple[tuple[int, int], int] | None = None

    def _build(self, width: int, looks: list[object] | None = None) -> list[int]:
        """Wrap the view at ``width``, reusing the strips of unchanged Texts; returns the changed line numbers.
        ``looks``: the view's :func:`cell_key` per Text, where the caller has them already."""
        view = self.view or ()
        if looks is None:
            looks = [cell_key(text) for text in view]
        if width != self._width:
            self._items = []
            self._width = width
        changed: list[int] = []
        items: list[tuple[object, list[Strip]]] = []
        strips: list[Strip] = []
        old_top = 0  # where item i started in the last view
        for i, (text, look) in enumerate(zip(view, looks, strict=True)):
            old = self._items[i] if i < len(self._items) else None
            same = old is not None and old[0] == look
            lines = old[1] if old is not None and same else self._wrap(text, width)
            # Rebuilt, or moved by a Text above it that wrapped onto more or fewer lines: repaint its lines.
            if not same or old_top != len(strips):
                changed.extend(range(len(strips), len(strips) + len(lines)))
            old_top += len(old[1]) if old is not None else 0
            items.append((look, lines))
            strips.extend(lines)
        self._items = items
        self._strips = strips
        return changed

    def watch_view(self, old: tuple[Text, ...] | None, view: tuple[Text, ...] | None) -> None:
        looks = [cell_key(text) for text in view or ()]
        if self._width > 0 and looks == [look for look, _ in self._items]:
            # Every line reads as the one drawn (the TP-group and NUMA panes are rebuilt from each frame): nothing to
            # measure, wrap or repaint (issue 53, session 26). ``always_update`` stays: a style-only change, which
            # ``Text ==`` ignores, must get here.
            return
        width = self.scrollable_content_region.width
        if width <= 0 or not self.is_attached:
            # Hidden (a narrow terminal shows one pane): wrap when shown; the show itself lays the screen out.
            self._width = -1
            return
        count = len(self._strips)
        changed = self._build(width, looks)  # the keys just compared: not made again
        if len(self._strips) != count:
            self.virtual_size = Size(width, len(self._strips))
            self.refresh(layout=True)
            return
        top = round(self.scroll_offset.y)
        if changed:
            self.refresh(*(Region(0, y - top, width, 1) for y in changed))

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        # Measured, not built: the layout may ask at a width other than the one the pane is drawn at (before a
        # resize lands). Building the strips here left them wrapped at that width and cropped at the drawn one, a
        # race the snapshots caught under load; the strips are wrapped only at the drawn width (render_line).
        if width == self._width and self._strips:
            return len(self._strips)
        return self.lines_at(width)

    def on_resize(self, event: events.Resize) -> None:
        width = self.scrollable_content_region.width
        if width != self._width:
            self._build(width)
            self.virtual_size = Size(width, len(self._strips))
            self.refresh()

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._base = None

    def render_line(self, y: int) -> Strip:
        if self._base is None:
            self._base = self.rich_style  # resolving it walks the DOM: once per style change, not per line
        width = self.scrollable_content_region.width
        if width != self._width and width > 0:
            self._build(width)
            self.virtual_size = Size(width, len(self._strips))
        index = y + round(self.scroll_offset.y)
        if not 0 <= index < len(self._strips):
            return Strip.blank(width, self._base)
        return self._strips[index].apply_style(self._base).crop(0, width).extend_cell_length(width, self._base)
