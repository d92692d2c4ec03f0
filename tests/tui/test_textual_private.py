"""amdtop leans on one private part of Textual for terminal bytes; these fail, by name, when it moves.

(The tables no longer override ``DataTable`` internals: ``widgets/row_table.py`` draws through the public line API.)

- ``tui/tty_crop.py``: ``ChopsUpdate.render_segments`` (partial updates cropped to the changed cells).
"""

from __future__ import annotations

import inspect
from importlib.metadata import version

from rich.console import Console
from rich.segment import Segment
from textual import _compositor
from textual.strip import Strip

from tui import tty_crop

TEXTUAL = version("textual")
WHY = f"textual {TEXTUAL}: amdtop was written against {tty_crop.PATCHED_FOR}; re-check and re-measure (docs/benchmarks.md)"


def test_textual_version_is_the_one_patched() -> None:
    assert TEXTUAL == tty_crop.PATCHED_FOR, WHY


def test_partial_update_is_cropped_to_the_changed_cells() -> None:
    assert "TODO: crop to x extents" in inspect.getsource(_compositor.ChopsUpdate), (
        f"{WHY}: Textual's partial update changed; tui/tty_crop.py may be unneeded or wrong"
    )
    strip = Strip([Segment("0123456789")])
    update = _compositor.ChopsUpdate([{0: strip}], [(0, 4, 7)], [[10]])
    console = Console(width=20, legacy_windows=False, force_terminal=True, color_system=None)
    textual_out = tty_crop.ORIGINAL(update, console)
    assert textual_out.endswith("0123456")  # Textual's own: from the strip's start up to the span's end
    assert tty_crop.render_segments(update, console) == "\x1b[1;5H456"  # the changed cells only
    assert tty_crop.install()
    assert _compositor.ChopsUpdate.render_segments is tty_crop.render_segments


def test_render_cells_is_crop_then_render() -> None:
    from rich.style import Style

    console = Console(width=40, legacy_windows=False, force_terminal=True, color_system="truecolor")
    red, bold = Style(color="red"), Style(bold=True)
    strip = Strip([Segment("ab", red), Segment("界x", bold), Segment("  ", None), Segment("yz", red)])
    for start in range(strip.cell_length + 1):
        for end in range(start, strip.cell_length + 2):
            assert tty_crop.render_cells(strip, start, end, console) == strip.crop(start, end).render(console), (
                start,
                end,
            )
