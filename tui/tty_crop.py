"""Send only the changed cells of a partial screen update, not each widget's line up to them.

Textual 8.2.8 writes a partial update (``ChopsUpdate.render_segments`` in ``textual/_compositor.py``) from the start of
every widget strip that a dirty span touches up to the span's end ("TODO: crop to x extents" there): a changed number
at column 60 of a table resends columns 1-60 of its line, so a per-cell refresh saves nothing on the wire. This
crops each strip to the span's start as well. Over SSH that is most of amdtop's bytes (docs/benchmarks.md).

It replaces a private method and reads a private attribute of Rich's Console: :func:`install` (called once, when
the app is built) imports them inside its guard and patches only the Textual and Rich versions it was written
against; anything missing (ImportError, AttributeError) leaves Textual's own path in place. tests/tui/
test_textual_private.py fails, naming the version, when either changes.

It also keeps, per console, the strip last written at each place of the screen (a shadow, as curses keeps one): a
widget that refreshes marks its whole region dirty, but on a 1 Hz dashboard most of its lines come out the same (an
idle GPU's history, the labels, the totals). Those are not sent again, and a changed line is sent from its first
changed segment to its last. A full repaint (``LayoutUpdate``, ``InlineUpdate``: layout, resize, a new screen, resume)
writes every cell, so it empties the shadow.

And it renders only the chops a partial update writes (``render_partial_update``): Textual renders every line of each
widget inside the bounding box of all dirty regions, which for a header clock and a row at the bottom is the whole
screen; here each widget renders only the cells of the dirty spans that no widget in front of it covers.
"""

from __future__ import annotations

import re
import threading
import weakref
from collections.abc import Iterator
from importlib.metadata import PackageNotFoundError, version
from itertools import pairwise
from typing import Any

from rich.cells import cell_len
from rich.color import ColorSystem
from rich.console import Console
from rich.segment import Segment
from rich.style import Style
from textual.geometry import Region
from textual.strip import Strip

PATCHED_FOR = "8.2.8"
RICH_FOR = "15.0.0"
"""Rich version whose ``Console._color_system`` :class:`Pen` reads (pinned in constraints.txt)."""
_ORIGINAL: Any = None
_ORIGINALS: dict[str, Any] = {}
"""Textual's own methods this module replaced besides ``render_segments`` (the tests compare both)."""
_installed: bool | None = None
_lock = threading.Lock()


Shadow = dict[int, dict[int, tuple[int, list[Segment]]]]
"""Row -> start of a chop -> (its end, the segments on the screen there)."""
_shadows: weakref.WeakKeyDictionary[Console, Shadow] = weakref.WeakKeyDictionary()


def shadow_of(console: Console) -> Shadow:
    """The strips last written to ``console``'s screen by partial updates."""
    shadow = _shadows.get(console)
    if shadow is None:
        shadow = _shadows[console] = {}
    return shadow


MERGE_GAP = 6
"""Changed runs this close are sent as one: a cursor move costs about as many bytes as the cells between."""


def _text_diff(a: str, b: str) -> tuple[int, int]:
    """[first, last + 1) of the characters where two equally long strings differ (they do differ)."""
    lo = 0
    while a[lo] == b[lo]:
        lo += 1
    hi = len(a)
    while a[hi - 1] == b[hi - 1]:
        hi -= 1
    return lo, hi


def changed_runs(old: list[Segment], new: list[Segment]) -> list[tuple[int, int]]:
    """Cell ranges [start, end) of ``new`` that differ from ``old`` (a strip of the same width), in order; empty when
    they are equal. Segments that start at the same cell are compared one by one (and a same-style, same-length
    narrow text character by character); from the first place the two are cut differently, the rest up to the last
    differing segment from the end is one run."""
    if old == new:
        return []
    runs: list[tuple[int, int]] = []
    pos = 0
    n = min(len(old), len(new))
    i = 0
    while i < n:
        a, b = old[i], new[i]
        width = cell_len(b.text)
        if a == b:
            pos += width
            i += 1
            continue
        if cell_len(a.text) != width:
            break  # cut differently from here on
        if a.style == b.style and a.control == b.control and len(a.text) == len(b.text) == width:
            lo, hi = _text_diff(a.text, b.text)  # narrow text in one style: a character is a cell
            runs.append((pos + lo, pos + hi))
        else:
            runs.append((pos, pos + width))
        pos += width
        i += 1
    else:
        if len(old) == len(new):
            return _merged(runs)
    # The tails are cut differently: one run from here to the last differing segment from the end.
    j = 0
    while j < min(len(old), len(new)) - i and old[-1 - j] == new[-1 - j]:
        j += 1
    end = pos + sum(cell_len(seg.text) for seg in new[i : len(new) - j])
    if end > pos:
        runs.append((pos, end))
    return _merged(runs)


def _merged(runs: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for start, end in runs:
        if out and start - out[-1][1] <= MERGE_GAP:
            out[-1] = (out[-1][0], end)
        else:
            out.append((start, end))
    return out


_SURE = re.compile("[\x20-\x7e\xa0-\xac\xae-\u02ff\u0391-\u03c9\u2010-\u2027\u2030-\u205e\u2190-\u21ff\u2500-\u25ff]*")
"""Characters every terminal draws one cell wide, as Rich counts them: ASCII, Latin-1 and its extensions, Greek
letters, punctuation, arrows, box drawing, blocks and shapes (what amdtop's own cells are made of). After a run of
anything else (an emoji with a variation selector, a combining mark, a joiner: a process name or a log line may hold
them, and terminals disagree on their width) the cursor's column is not trusted and the next move is absolute."""

_WHOLE = 1 << 30
"""An end past any strip: :meth:`Pen.cells` then writes all of it."""


class Pen:
    """The terminal's colours across one partial update's writes (SGR state, as curses keeps one).

    Textual renders each segment as ``ESC[style m text ESC[0m``: a 1 Hz tick that changes a dozen cells sends a dozen
    full styles and resets, two thirds of its bytes (``bench/tty_regions.py`` on the H200 replay). The pen leaves
    the style on between writes (cursor moves do not change it), sends nothing for a segment in the style already
    set, only the colour that changed between two styles without attributes (bold, dim, reverse...), and a reset plus
    the whole style otherwise; :meth:`close` resets at the end, so the terminal is left as Textual leaves it."""

    __slots__ = ("append", "color_system", "style")

    def __init__(self, append: Any, console: Console) -> None:
        self.append = append
        self.color_system = getattr(console, "_color_system", None) or ColorSystem.TRUECOLOR
        self.style: Style | None = None

    def write(self, style: Style | None, text: str) -> None:
        """Write ``text`` in ``style`` (``None``: the default)."""
        append = self.append
        ansi: str | None
        if style is None:
            ansi = ""
        else:
            if style._link:
                self.close()  # a hyperlink: Textual's own form, which ends in a reset
                append(Strip.render_style(style, text, color_system=self.color_system))
                return
            ansi = style._ansi
            if ansi is None:
                ansi = Strip.render_ansi(style, self.color_system)
        if not ansi:
            self.close()
            append(text)
            return
        assert style is not None
        current = self.style
        if current is not None:
            if current is style or current == style:
                append(text)
                return
            if not (current._attributes & current._set_attributes) and not (style._attributes & style._set_attributes):
                codes: list[str] = []
                if style._color != current._color:
                    fg = style._color
                    codes += ("39",) if fg is None else fg.downgrade(self.color_system).get_ansi_codes()
                if style._bgcolor != current._bgcolor:
                    bg = style._bgcolor
                    codes += ("49",) if bg is None else bg.downgrade(self.color_system).get_ansi_codes(False)
                if codes:
                    append(f"\x1b[{';'.join(codes)}m")
                self.style = style
                append(text)
                return
            append("\x1b[0m")
        append(f"\x1b[{ansi}m")
        self.style = style
        append(text)

    def cells(self, strip: Strip, start: int, end: int) -> bool:
        """Cells [start, end) of ``strip`` (the whole strip: 0, its length); True when every character written is one
        of :data:`_SURE` (the terminal's cursor then stands where the cells counted say)."""
        write = self.write
        sure = _SURE.fullmatch
        counted = True
        for style, text in cropped(strip, start, end):
            write(style, text)
            if counted and sure(text) is None:
                counted = False
        return counted

    def close(self) -> None:
        """Back to the default style."""
        if self.style is not None:
            self.append("\x1b[0m")
            self.style = None


def render_segments(self: Any, console: Console) -> str:
    """``ChopsUpdate.render_segments`` sending, of each chop a dirty span touches, only what differs from what the
    shadow says is on the screen (the whole chop where the shadow does not know it), through one :class:`Pen`."""
    sequences: list[str] = []
    append = sequences.append
    pen = Pen(append, console)
    jobs: list[tuple[int, int, int, Strip, int, int]] = []
    groups: dict[Style | None, int] = {}
    chops = self.chops
    chop_ends = self.chop_ends
    shadow = shadow_of(console)
    done: set[tuple[int, int]] = set()
    for y, x1, x2 in self.spans:
        line = chops[y]
        ends = chop_ends[y]
        row = shadow.setdefault(y, {})
        for end, (x, strip) in zip(ends, line.items(), strict=False):
            if strip is None or x > x2 or end <= x1 or (y, x) in done:
                continue
            done.add((y, x))  # several spans of one line may touch one chop: it is compared and written once
            segments = list(strip)
            old = row.get(x)
            runs = [(0, end - x)]
            if old is not None and old[0] == end:
                # The chop is this widget's current rendering of the line: cells of it outside the dirty span are
                # sent too when they changed (the widget refreshes them later anyway), so the shadow stays exact.
                runs = changed_runs(old[1], segments)
                if not runs:
                    continue  # the screen shows this already
            start, stop = x + runs[0][0], x + runs[-1][1]
            # What this writes covers whatever another chop (a toast, a dialog since gone) left at these cells.
            for other in [o for o, (o_end, _) in row.items() if o < stop and o_end > start and o != x]:
                del row[other]
            row[x] = (end, segments)
            for run_start, run_stop in runs:
                whole = not run_start and run_stop == end - x  # the whole strip, as strip.render writes it
                group = groups.setdefault(_style_at(segments, run_start), len(groups))
                jobs.append((group, y, x + run_start, strip, run_start, _WHOLE if whole else run_stop))
    # The runs of one update cover distinct cells, so their order is free: those that start in one style go together
    # (a history tick's dozen cells alternate two colours row by row: a colour switch per cell, else two in all).
    jobs.sort(key=_group_of)
    cursor: tuple[int, int] | None = None
    for _group, y, at, strip, run_start, run_stop in jobs:
        append(move(cursor, y, at))
        counted = pen.cells(strip, run_start, run_stop)
        after = at + min(run_stop, strip.cell_length) - run_start
        # Where the terminal's cursor now is: not known after the line's last cell (terminals differ on where a
        # write to the last column leaves it), after a character whose width terminals disagree on, or after a
        # control segment.
        known = counted and after < chop_ends[y][-1] and not any(seg.control for seg in strip)
        cursor = (y, after) if known else None
    pen.close()
    return "".join(sequences)


def move(cursor: tuple[int, int] | None, y: int, x: int) -> str:
    """The fewest bytes that take the cursor from ``cursor`` (row, column; ``None``: unknown) to row ``y``, column
    ``x`` (0-based), as curses picks its moves: a history tick writes two cells per row of a column of rows, and the
    absolute move (``ESC[row;colH``, what ``Control.move_to`` writes) to each cost twice the cells it wrote; one row
    down and back over the two cells is ``ESC[B`` and two backspaces. Relative moves trust the cells counted for what
    was written, as the rest of Textual's screen does (its borders are as wide as it counts them)."""
    absolute = f"\x1b[{y + 1};{x + 1}H"
    if cursor is None:
        return absolute
    dy, dx = y - cursor[0], x - cursor[1]
    if dy == 0 and dx == 0:
        return ""
    if dy > 0:
        down = "\x1b[B" if dy == 1 else f"\x1b[{dy}B"
    elif dy < 0:
        down = "\x1b[A" if dy == -1 else f"\x1b[{-dy}A"
    else:
        down = ""
    if dx == 0:
        across = ""
    elif dx > 0:
        across = "\x1b[C" if dx == 1 else f"\x1b[{dx}C"
    else:
        across = "\b" * -dx if -dx <= 3 else f"\x1b[{-dx}D"
    relative = down + across
    if dy == 0 and len(f"\x1b[{x + 1}G") < len(relative):
        relative = f"\x1b[{x + 1}G"
    return relative if len(relative) < len(absolute) else absolute


def _group_of(job: tuple[int, int, int, Strip, int, int]) -> int:
    return job[0]


def _style_at(segments: list[Segment], cell: int) -> Style | None:
    """The style of the segment holding ``cell``."""
    pos = 0
    for text, style, _control in segments:
        pos += cell_len(text)
        if pos > cell:
            return style
    return None


def span_chops(self: Any, spans: list[tuple[int, int, int]]) -> list[dict[int, Any]]:
    """The chops a partial update writes, and only those: of each line's dirty spans, each widget renders just the
    chops it shows there that no widget in front of it filled (a screen or container behind its panes, a pane beside
    the dirty cells, render nothing). Rendering every widget on a dirty line whole (the last session's way) made a
    header clock's ten cells render the status bar, its container and the screen twice, and a history graph's row the
    pane beside it: nine widget renders a tick where two are needed.

    A chop is written when a span touches it (``render_segments``: not ``x > x2 or end <= x1``), so those are the
    chops rendered here, each whole, as Textual's own would have them (a test compares the two)."""
    cuts = self.cuts
    chops: list[dict[int, Any]] = [dict.fromkeys(cut_set[:-1]) for cut_set in cuts]
    by_line: dict[int, list[tuple[int, int]]] = {}
    for y, x1, x2 in spans:
        by_line.setdefault(y, []).append((x1, x2))
    lines = sorted(by_line)
    if not lines:
        return chops
    for widget, (region, clip) in self.visible_widgets.items():
        rx, ry, rw, rh = region.intersection(clip)
        if not (rw and rh) or ry > lines[-1] or ry + rh <= lines[0]:
            continue
        right = rx + rw
        # Per dirty line of this widget: the chops [cut, end) it must fill.
        need: dict[int, list[tuple[int, int]]] = {}
        for y in lines:
            if y < ry:
                continue
            if y >= ry + rh:
                break
            line_cuts = cuts[y]
            chops_line = chops[y]
            wanted = []
            for cut, end in pairwise(line_cuts):
                if cut < rx or end > right or chops_line[cut] is not None:
                    continue
                if any(not (cut > x2 or end <= x1) for x1, x2 in by_line[y]):
                    wanted.append((cut, end))
            if wanted:
                need[y] = wanted
        ys = sorted(need)
        i = 0
        while i < len(ys):
            j = i + 1
            while j < len(ys) and ys[j] == ys[j - 1] + 1:
                j += 1
            run = ys[i:j]
            left = min(need[y][0][0] for y in run)
            stop = max(need[y][-1][1] for y in run)
            strips = widget.render_lines(Region(left - region.x, run[0] - region.y, stop - left, len(run)))
            for y, strip in zip(run, strips, strict=False):
                bounds = [left, *(c for c in cuts[y] if left < c < stop), stop]
                pieces = dict(zip(bounds, strip.divide([b - left for b in bounds[1:]]), strict=False))
                chops_line = chops[y]
                for cut, _end in need[y]:
                    chops_line[cut] = pieces[cut]
            i = j
    return chops


def render_partial_update(self: Any) -> Any:
    """``Compositor.render_partial_update`` with the chops of :func:`span_chops`."""
    from textual._compositor import ChopsUpdate

    update_regions = self._dirty_regions.copy()
    self._dirty_regions.clear()
    if not update_regions:
        return None
    screen_region = self.size.region
    spans = [
        (y, x1, x2)
        for y, x1, x2 in self._regions_to_spans(update_regions)
        if 0 <= y < screen_region.height and x1 < screen_region.width and x2 > 0
    ]
    if not spans:
        return None
    chops = span_chops(self, spans)
    return ChopsUpdate(chops, spans, [cut_set[1:] for cut_set in self.cuts])


def _full_repaint(original: Any) -> Any:
    """A full-repaint ``render_segments`` that empties the console's shadow first."""

    def render_segments(self: Any, console: Console) -> str:
        shadow_of(console).clear()
        return str(original(self, console))

    render_segments.__wrapped__ = original  # type: ignore[attr-defined]
    return render_segments


def cropped(strip: Strip, start: int, end: int) -> Iterator[tuple[Style | None, str]]:
    """The (style, text) pieces of cells [start, end) of ``strip``: its segments, the two at the edges cut to the
    span (a wide character the edge would halve comes out as a space, as Rich's ``split_cells`` makes it)."""
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
            yield style, segment.text


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
                    full = (_compositor.LayoutUpdate, _compositor.InlineUpdate)
                    compositor = _compositor.Compositor
                    own_partial = compositor.render_partial_update
                    _ORIGINAL = chops.render_segments
                    chops.render_segments = render_segments  # type: ignore[method-assign]
                    for cls in full:
                        cls.render_segments = _full_repaint(cls.render_segments)  # type: ignore[method-assign]
                    compositor.render_partial_update = render_partial_update  # type: ignore[method-assign]
                    _ORIGINALS["render_partial_update"] = own_partial
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
