"""Repaint the panes a frame changed from the frame's own handler, not three message hops later.

In Textual 8.2.8 a widget's ``refresh()`` posts to its own message loop, whose idle handler posts an ``Update`` to the
screen's loop, whose idle handler resumes the screen's update timer, whose tick (a sixtieth of a second later) runs
the compositor. On an idle GPU a frame changes the header clock and a history column and nothing else, so that
chain was most of what an attached viewer spent each second (docs/benchmarks.md, "Session 11"). :func:`repaint_now`
does what the timer's tick does, for widgets that need only a repaint, right after the frame is applied; the
widgets' own loops still wake (``refresh`` prompts them) but find nothing left to post.

It reads and clears private flags of Textual's widgets and calls the screen's private compositor refresh: it runs
only on the Textual version ``tui/tty_crop.py`` was written against (the same pin, tested in
tests/tui/test_textual_private.py) and does nothing, leaving Textual's own path, where any part is missing.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from tui import tty_crop

_BUSY = ("_layout_required", "_scroll_required", "_recompose_required", "_refresh_styles_required")
"""Widget flags that ask for more than a repaint: such a widget is left to Textual's own path."""


def repaint_now(screen: Any, widgets: Iterable[Any]) -> int:
    """Repaint those of ``widgets`` that wait only for a repaint, now; returns how many (0: Textual's path does it)."""
    if not tty_crop.install():  # Textual is not the version these private parts were read in
        return 0
    try:
        app = screen.app
        if app._batch_count or app.is_inline or screen is not app.screen or not screen.is_current:
            return 0
        if screen._layout_required or screen._scroll_required or screen._recompose_required or screen._repaint_required:
            return 0  # the timer's tick must lay out or repaint the whole screen: leave it all to it
        ready = [
            w
            for w in widgets
            if w._repaint_required and w.is_attached and w.display and not any(getattr(w, f) for f in _BUSY)
        ]
        if not ready:
            return 0
        dirty = screen._dirty_widgets
        update_widgets = screen._compositor.update_widgets
        compositor_refresh = screen._compositor_refresh
    except AttributeError:
        return 0
    for widget in ready:
        widget._repaint_required = False  # its idle handler would post the Update this repaint makes moot
    dirty.update(ready)
    update_widgets(dirty)
    compositor_refresh()
    return len(ready)
