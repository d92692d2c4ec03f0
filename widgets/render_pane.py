"""A text pane that repaints only when its (immutable) view value changes."""

from __future__ import annotations

from typing import Any

from rich.console import Group, RenderableType
from textual.reactive import reactive
from textual.widgets import Static


class RenderPane(Static):
    """Assign ``view`` a frozen value; the pane re-renders only when it differs from the last one."""

    DEFAULT_CSS = """
    RenderPane { height: auto; }
    """

    view: reactive[Any] = reactive(None)
    """The value drawn; equal values cause no repaint."""

    _height: int | None = None

    def render_view(self, view: Any) -> RenderableType:
        if view is None:
            return ""
        if isinstance(view, tuple):
            return Group(*view)
        return view  # type: ignore[no-any-return]

    def _lines(self, renderable: RenderableType) -> int | None:
        """Lines ``renderable`` takes at the pane's width once wrapped (``None`` before the pane has a width)."""
        width = self.content_size.width
        if width <= 0 or not self.is_attached:
            return None
        console = self.app.console
        return len(console.render_lines(renderable, console.options.update_width(width), pad=False))

    def watch_view(self, old: Any, view: Any) -> None:
        # Same wrapped height: repaint in place, skipping the layout pass (which repaints every scrollbar). Counting the
        # view's items is not enough: a message that wraps onto one more line grows the pane (a stale row was left
        # on screen when the pane kept its old height).
        renderable = self.render_view(view)
        height = self._lines(renderable)
        same_height = height is not None and height == self._height
        self._height = height
        self.update(renderable, layout=not same_height)
