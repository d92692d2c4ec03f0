"""A one-line label for a value that changes every tick (the clock)."""

from __future__ import annotations

from rich.segment import Segment
from rich.style import Style
from textual.strip import Strip
from textual.widget import Widget


class LineLabel(Widget):
    """Plain text on one line, drawn as one segment: a Static parses markup and builds its content on each update,
    a tenth of a millisecond the clock does not need every second."""

    DEFAULT_CSS = """
    LineLabel { height: 1; }
    """

    def __init__(self, text: str = "", *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self._text = text
        self._base: Style | None = None

    def set_text(self, text: str) -> None:
        """Show ``text`` (no markup); the same text repaints nothing."""
        if text != self._text:
            self._text = text
            self.refresh()

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._base = None

    def render_line(self, y: int) -> Strip:
        if self._base is None:
            self._base = self.rich_style
        width = self.size.width
        if y != 0:
            return Strip.blank(width, self._base)
        return Strip([Segment(self._text, self._base)]).crop(0, width).extend_cell_length(width, self._base)
