"""Rich Text to segments for line-API widgets."""

from __future__ import annotations

from rich.console import Console
from rich.segment import Segment
from rich.text import Text


def text_segments(text: Text, console: Console) -> list[Segment]:
    """The segments of one line of ``text``, its own style included (``Text.render`` leaves the base style to the
    caller: a Text with a style and no spans renders unstyled)."""
    segments = list(text.render(console))
    if text.style:
        segments = list(Segment.apply_style(segments, console.get_style(text.style)))
    return segments


def cell_key(cell: object) -> object:
    """What a cell or line looks like, as a hashable value: ``Text.__eq__`` ignores the base style (a GPU that turns
    red when lost keeps its text), so Texts are compared by text, style and spans."""
    if isinstance(cell, Text):
        return (cell.plain, str(cell.style), tuple(cell.spans))
    return cell
