"""Send only the changed cells of a partial screen update, not each widget's line up to them.

Textual 8.2.8 writes a partial update (``ChopsUpdate.render_segments`` in ``textual/_compositor.py``) from the start of
every widget strip that a dirty span touches up to the span's end ("TODO: crop to x extents" there): a changed number
at column 60 of a table resends columns 1-60 of its line, so a per-cell refresh saves nothing on the wire. This
crops each strip to the span's start as well. Over SSH that is most of amdtop's bytes (docs/benchmarks.md).

It replaces a private method and reads a private attribute of Rich's Console: :func:`install` (called once, when
the app is built) imports them inside its guard and patches only the Textual and Rich versions it was written
against; anything missing (ImportError, AttributeError) leaves Textual's own path in place. tests/tui/
test_textual_private.py fails, naming the version, when either changes.
"""

from __future__ import annotations

import threading
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from rich.cells import cell_len
from rich.color import ColorSystem
from rich.console import Console
from textual.strip import Strip

PATCHED_FOR = "8.2.8"
RICH_FOR = "15.0.0"
"""Rich version whose ``Console._color_system`` :func:`render_cells` reads (pinned in pyproject.toml)."""
_ORIGINAL: Any = None
_installed: bool | None = None
_lock = threading.Lock()


def render_segments(self: Any, console: Console) -> str:
    """``ChopsUpdate.render_segments`` with each strip cropped to the dirty span on both sides."""
    sequences: list[str] = []
    append = sequences.append
    chops = self.chops
    chop_ends = self.chop_ends
    last_y = self.spans[-1][0]
    for y, x1, x2 in self.spans:
        line = chops[y]
        ends = chop_ends[y]
        for end, (x, strip) in zip(ends, line.items(), strict=False):
            if strip is None or x > x2 or end <= x1:
                continue
            start = max(x, x1)
            stop = min(end, x2)
            # Control.move_to(start, y) writes this; building the Control object cost a tenth of an idle dashboard.
            append(f"\x1b[{y + 1};{start + 1}H")
            if start != x or stop != end:
                append(render_cells(strip, start - x, stop - x, console))
            else:
                append(strip.render(console))
        if y != last_y:
            append("\n")
    return "".join(sequences)


def render_cells(strip: Strip, start: int, end: int, console: Console) -> str:
    """``strip.crop(start, end).render(console)`` without the intermediate Strip: a Strip builds seven caches when it
    is made, and a tick crops one per changed span (that was most of the dashboard's output cost)."""
    color_system = getattr(console, "_color_system", None) or ColorSystem.TRUECOLOR
    render = Strip.render_style
    out: list[str] = []
    pos = 0
    for segment in strip:
        text, style, _control = segment
        seg_start, pos = pos, pos + cell_len(text)
        if pos <= start:
            continue
        if seg_start >= end:
            break
        if seg_start < start:
            segment = segment.split_cells(start - seg_start)[1]
        if pos > end:
            segment = segment.split_cells(cell_len(segment.text) - (pos - end))[0]
        if segment.text:
            out.append(segment.text if style is None else render(style, segment.text, color_system=color_system))
    return "".join(out)


def _versions_match() -> bool:
    try:
        return version("textual") == PATCHED_FOR and version("rich") == RICH_FOR
    except PackageNotFoundError:
        return False


def install() -> bool:
    """Patch Textual's partial updates, once (only the versions this was written for); True when patched."""
    global _ORIGINAL, _installed
    with _lock:
        if _installed is None:
            _installed = False
            if _versions_match():
                try:
                    from textual import _compositor

                    chops = _compositor.ChopsUpdate
                    _ORIGINAL = chops.render_segments
                    chops.render_segments = render_segments  # type: ignore[method-assign]
                    _installed = True
                except (ImportError, AttributeError):
                    _installed = False  # Textual moved it: its own (uncropped) path stays
        return _installed


def original() -> Any:
    """Textual's own ``ChopsUpdate.render_segments`` (the test compares both); None where Textual lacks it."""
    if _ORIGINAL is not None:
        return _ORIGINAL
    try:
        from textual import _compositor

        return _compositor.ChopsUpdate.render_segments
    except (ImportError, AttributeError):
        return None
