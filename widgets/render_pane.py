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

    def render_view(self, view: Any) -> RenderableType:
        if view is None:
            return ""
        if isinstance(view, tuple):
            return Group(*view)
        return view  # type: ignore[no-any-return]

    def watch_view(self, old: Any, view: Any) -> None:
        # Same number of lines: repaint in place, skipping the layout pass (which repaints every scrollbar).
        same_height = isinstance(old, tuple) and isinstance(view, tuple) and len(old) == len(view)
        self.update(self.render_view(view), layout=not same_height)
