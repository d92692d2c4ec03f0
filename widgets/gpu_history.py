"""Per-GPU history strips (utilization, VRAM, power) as wide as the pane, time running left to right."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence
from itertools import islice

from rich.segment import Segment
from rich.style import Style
from textual.geometry import Region
from textual.strip import Strip
from textual.widget import Widget

from amdtop.cpulist import runs
from amdtop.pipeline.frame import GpuHistory as PipelineHistory
from amdtop.pipeline.series import newest

SPARK = "▁▂▃▄▅▆▇█"
KEEP = 600
"""Samples kept per GPU and metric: wider than any terminal's strip."""
METRICS = (("util", "green"), ("vram", "magenta"), ("power", "yellow"))
_PLAIN = {style: Style.parse(style) for _, style in METRICS}
_BOLD = {style: Style.parse(f"bold {style}") for _, style in METRICS}
_LABEL = Style(bold=True)
_DIM = Style(dim=True)
NOW_MARK = "▲"
"""Under the newest column of each strip, on the time axis."""
LABEL = 4  # "  3 "
VALUE = 6  # " 100%" / " 610W"


def spark(values: Sequence[float | None], width: int, top: float) -> str:
    """The last ``width`` values as block characters against ``top``; gaps (unknown values) as spaces."""
    tail = list(values)[-width:]
    chars = [" " if v is None else SPARK[max(0, min(7, int(v / top * 7.999)))] for v in tail]
    return "".join(chars).rjust(width)


def sweep(values: Sequence[float | None], width: int, pushes: int, top: float) -> str:
    """The strip after ``pushes`` samples, swept: sample ``i`` sits at column ``i % width``; older columns hold the
    last sweep's samples (the time axis under the strips marks the newest column: :func:`now_column`)."""
    cells = [" "] * width
    # islice, not list(values)[-n:]: a deque of 600 samples per strip, three strips per GPU line, every tick.
    kept = list(islice(values, max(0, len(values) - width), None))
    first = pushes - len(kept)
    for offset, value in enumerate(kept):
        if value is not None:
            cells[(first + offset) % width] = SPARK[max(0, min(7, int(value / top * 7.999)))]
    return "".join(cells)


def sweep_level(values: Sequence[float | None], width: int, pushes: int, top: float, rows: int, row: int) -> str:
    """Row ``row`` (0 the top) of a strip ``rows`` lines tall: :func:`sweep` with each column a bar of ``8 * rows``
    eighths, so a GPU with room gets a readable chart instead of one line of blocks."""
    if rows == 1:
        return sweep(values, width, pushes, top)
    cells = [" "] * width
    kept = list(islice(values, max(0, len(values) - width), None))
    first = pushes - len(kept)
    floor = (rows - 1 - row) * 8  # eighths below this row
    for offset, value in enumerate(kept):
        if value is None:
            continue
        eighths = max(1, min(8 * rows, int(value / top * 8 * rows + 0.5))) if value > 0 else 0
        here = eighths - floor
        if here > 0:
            cells[(first + offset) % width] = "█" if here >= 8 else SPARK[here - 1]
    return "".join(cells)


def cell(value: float | None, top: float, rows: int, row: int) -> str:
    """The character one sample puts in row ``row`` of its column (what :func:`sweep_level` draws for it)."""
    if value is None:
        return " "
    if rows == 1:
        return SPARK[max(0, min(7, int(value / top * 7.999)))]
    eighths = max(1, min(8 * rows, int(value / top * 8 * rows + 0.5))) if value > 0 else 0
    here = eighths - (rows - 1 - row) * 8
    return " " if here <= 0 else "█" if here >= 8 else SPARK[here - 1]


def now_column(pushes: int, width: int) -> int | None:
    """The column of a strip ``width`` wide that holds the newest of ``pushes`` samples (``None`` before the first)."""
    return (pushes - 1) % width if pushes > 0 else None


def value_text(value: float | None, metric: str) -> str:
    """The number beside a strip."""
    return "   N/A" if value is None else f"{value:5.0f}{'W' if metric == 'power' else '%'}"


def rows_per_gpu(gpus: int) -> int:
    """Most lines a GPU's strips may take: few GPUs get taller charts (one GPU: six lines), eight get one each."""
    return max(1, min(6, 12 // max(1, gpus)))


def _ago(seconds: float) -> str:
    return f"-{seconds / 60:.0f}m" if seconds >= 120 else f"-{seconds:.0f}s"


class GpuHistory(Widget):
    """Feed it every frame's history with :meth:`push`; it draws one line per GPU.

    Each line holds three strips (utilization %, VRAM used %, power W against the highest power seen), each a third
    of the pane's width; the last line is the time axis. The strips sweep, like a patient monitor: each sample is
    written at a head that moves right and wraps, the rest of the strip stays where it was, and one cell of the time
    axis under the head marks "now". Over SSH a tick then repaints the cells of the new column that differ from the
    last sweep's (none on a GPU held at 100 %), two cells of the axis and the numbers, not the whole pane (a scrolling
    strip changes every cell every tick). Until session 24 a blank column after the head marked "now": it moved with
    the head, so every row of two columns per strip and GPU changed at every tick, the larger part of a busy
    dashboard's bytes (issue 53). A resize redraws from the kept samples.
    """

    DEFAULT_CSS = """
    GpuHistory { height: auto; }
    """

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self._gpus: list[int] = []
        self._series: dict[tuple[int, str], deque[float | None]] = {}
        self._power_top = 1.0
        self._pushes = 0
        self._power_top_changed = False
        self.interval = 1.0
        """Seconds between two pushes (for the time axis)."""
        self._strips: dict[int, tuple[tuple[float, ...], Strip]] = {}
        self._base: Style | None = None
        self._styled: dict[Style | None, Style] = {}
        self._grids: dict[tuple[int, str], list[list[str]]] = {}
        """Per GPU and metric, the characters of its strip's rows as drawn: a push writes the new column
        (:meth:`_advance`), instead of every row of every strip being swept again from the samples (18 strips
        of ~30 samples for one GPU, a third of a millisecond a frame on the dev VM)."""
        self._values_moved: set[tuple[int, str]] = set()
        """(GPU, metric) whose shown value this push changed."""
        self._grid_at: tuple[int, int, int, float] = (0, 0, 0, 0.0)
        """(pushes, strip width, rows, power top) the grids were drawn for: anything else redraws them."""

    def push(
        self, history: Sequence[PipelineHistory], interval: float | None = None, power_caps: Iterable[float | None] = ()
    ) -> None:
        """Take the newest point of each GPU's history from the frame (the pipeline keeps the series; this widget
        keeps only what it has drawn, for its sweep). ``power_caps``: the GPUs' power caps, the power chart's top
        where known (nvtop's scale: an idle H200 at 78 of 700 W is a low line, not six rows of full blocks that the
        highest power seen so far, 78 W, made of it, and that the terminal was sent a column of every second)."""
        if interval is not None and interval != self.interval:
            self.interval = interval
            self.refresh()  # the header's "per sweep" span
        cap = max((c for c in power_caps if c), default=None)
        if cap is not None and cap > self._power_top:
            self._power_top = cap
            self._power_top_changed = True
        gpus = [h.index for h in history]
        if gpus != self._gpus:
            self._gpus = gpus
            self._grids.clear()
            self.refresh(layout=True)
        for h in history:
            util, vram, power = newest(h.util_pct), newest(h.vram_pct), newest(h.power_w)
            if power is not None and power > self._power_top:
                self._power_top = power
                self._power_top_changed = True
            for key, value in (("util", util), ("vram", vram), ("power", power)):
                series = self._series.setdefault((h.index, key), deque(maxlen=KEEP))
                if value_text(series[-1] if series else None, key) != value_text(value, key):
                    self._values_moved.add((h.index, key))
                series.append(value)
        self._pushes += 1
        self._refresh_head(self._advance())
        self._values_moved.clear()

    def _advance(self) -> dict[str, set[int]] | None:
        """Move the kept grids on by this push: the newest samples' column. Returns, per metric, the pane rows (from
        0, below the header) whose cell in that column changed (a strip not drawn since the grids were last swept: all
        its rows), or ``None`` where the grids were not kept and the whole column must be repainted."""
        pushes, width, rows, power_top = self._grid_at
        if not self._grids:
            return None
        if (pushes + 1, width, rows, power_top) != (self._pushes, self.strip_width(), self.rows, self._power_top):
            self._grids.clear()  # a push missed, a new size or a new power top: redrawn from the samples when drawn
            return None
        if width > KEEP:
            # A strip wider than the samples kept (a terminal ~1830 cells wide) blanks the column of the sample that
            # fell out of the deque, which the grid would keep: swept from the samples instead.
            self._grids.clear()
            return None
        head = (self._pushes - 1) % width
        moved: dict[str, set[int]] = {name: set() for name, _ in METRICS}
        for pos, index in enumerate(self._gpus):
            for name, _style in METRICS:
                grid = self._grids.get((index, name))
                if grid is None:  # not drawn since the grids were last swept: its whole column
                    moved[name].update(range(pos * rows, pos * rows + rows))
                    continue
                values = self._series.get((index, name))
                value = values[-1] if values else None
                scale = self._power_top if name == "power" else 100.0
                for row, chars in enumerate(grid):
                    new = cell(value, scale, rows, row)
                    if chars[head] != new:
                        chars[head] = new
                        moved[name].add(pos * rows + row)
        self._grid_at = (self._pushes, width, rows, power_top)
        return moved

    def _grid(self, index: int, name: str, width: int, rows: int) -> list[list[str]]:
        """The rows of one strip as characters, for the current pushes, width, rows and power top."""
        at = (self._pushes, width, rows, self._power_top)
        if at != self._grid_at:
            self._grids.clear()
            self._grid_at = at
        grid = self._grids.get((index, name))
        if grid is None:
            values = self._series.get((index, name), ())
            scale = self._power_top if name == "power" else 100.0
            grid = [list(sweep_level(values, width, self._pushes, scale, rows, row)) for row in range(rows)]
            self._grids[(index, name)] = grid
        return grid

    def _refresh_head(self, moved: dict[str, set[int]] | None) -> None:
        """Repaint what this push changed: the new column's cells that differ from the last sweep's (``moved``; all
        of it when ``None``), the values whose text changed, and the axis's "now" cells. A line with no changed cell
        is not rendered again: on an idle GPU a tick re-rendered the pane's seven lines for the two axis cells that
        moved, as much of the dashboard's frame as the rest of it (issue 53, session 25)."""
        if not self.size.width or self._pushes < 2 or self._power_top_changed:
            # A new highest power rescales every power cell: repaint all (rare: the top only grows).
            self._power_top_changed = False
            self.refresh()
            return
        width = self.strip_width()
        head = (self._pushes - 1) % width
        before = (head - 1) % width
        per_gpu = self.rows
        rows = len(self._gpus) * per_gpu
        left, top = 0, 1  # content coordinates (Textual adds the border); line 0 is the header
        regions: list[Region] = []
        for block, (name, _style) in enumerate(METRICS):
            x = left + LABEL + block * (width + VALUE + 1)
            if moved is None:
                regions.append(Region(x + head, top, 1, rows))
            else:
                regions.extend(Region(x + head, top + y, 1, last - y + 1) for y, last in runs(moved[name]))
            # A value sits on its GPU's last row.
            for pos, index in enumerate(self._gpus):
                if (index, name) in self._values_moved:
                    regions.append(Region(x + width, top + pos * per_gpu + per_gpu - 1, VALUE, 1))
            # The axis's "now" cell: the new one and the one it leaves.
            regions.append(Region(x + head, top + rows, 1, 1))
            regions.append(Region(x + before, top + rows, 1, 1))
        self.refresh(*regions)

    def get_content_height(self, container: object, viewport: object, width: int) -> int:
        # What it would fill: the tallest charts it draws (the layout may give it less; it then draws shorter ones).
        return len(self._gpus) * rows_per_gpu(len(self._gpus)) + 2 if self._gpus else 1

    @property
    def rows(self) -> int:
        """Lines each GPU's strips take at the pane's height (a header and the time axis around them): all the pane
        has, so a node with few GPUs and room to spare (one GPU, no worker) gets taller, finer charts."""
        gpus = len(self._gpus)
        if not gpus:
            return 1
        return max(1, (self.size.height - 2) // gpus)

    def strip_width(self) -> int:
        return max(4, (self.size.width - LABEL) // len(METRICS) - VALUE - 1)

    # -- drawing: one cached Strip per line, through the line API -------------------------------------------------
    # Rendering the whole pane as one Text re-segmented 12 lines of 200 cells per tick (~2 ms, the largest share of
    # the dashboard's CPU after the tables); a GPU's line is a handful of segments, rebuilt when a sample arrives.
    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._strips.clear()
        self._base = None

    def render_line(self, y: int) -> Strip:
        width = self.size.width
        key = (y, self._pushes, width, self._power_top, self.interval, len(self._gpus), self.rows)
        hit = self._strips.get(y)
        if hit is not None and hit[0] == key:
            return hit[1]
        if self._base is None:
            self._base = self.rich_style  # resolving it walks the DOM: once per style change, not per line
            self._styled = {}
        base = self._base
        # One Strip per line, built styled and to length: every character here is one cell wide (ASCII, block
        # elements), so the length is counted, not measured, and no intermediate strips are made.
        segments: list[Segment] = []
        used = 0
        for seg in self._line(y):
            text = seg.text[: width - used]
            if not text:
                break
            styled = self._styled.get(seg.style)
            if styled is None:
                styled = self._styled[seg.style] = base + seg.style if seg.style is not None else base
            segments.append(Segment(text, styled))
            used += len(text)
        if used < width:
            segments.append(Segment(" " * (width - used), base))
        strip = Strip(segments, width)
        self._strips[y] = (key, strip)
        return strip

    def _line(self, y: int) -> list[Segment]:
        if not self._gpus:
            return [Segment("No GPU history yet.", _DIM)] if y == 0 else []
        width = self.strip_width()
        if y == 0:
            head = [Segment(" " * LABEL)]
            span = f"{_ago(width * self.interval).lstrip('-')} per sweep"
            for name, style in METRICS:
                top = f" ({span})" if name == "util" else f" (top {self._power_top:.0f}W)" if name == "power" else ""
                label = f"{name}{top}" if len(name + top) <= width + VALUE else name  # a narrow pane: the name
                head.append(Segment(label.ljust(width + VALUE + 1), _BOLD[style]))
            return head
        rows = self.rows
        if y <= len(self._gpus) * rows:
            index = self._gpus[(y - 1) // rows]
            row = (y - 1) % rows
            line = [Segment(f"{index:>3} " if row == rows - 1 else " " * LABEL, _LABEL)]  # beside its values
            for name, style in METRICS:
                values = self._series.get((index, name), ())
                line.append(Segment("".join(self._grid(index, name, width, rows)[row]), _PLAIN[style]))
                value = value_text(values[-1] if values else None, name) if row == rows - 1 else ""
                line.append(Segment(value.ljust(VALUE) + " "))
            return line
        if y == len(self._gpus) * rows + 1:
            # "now" is a mark under the newest column, in the axis's own style: a tick changes two characters per
            # strip, which the terminal's diff (tui/tty_crop.changed_runs) sends as two cells and no style (a lit
            # cell in another style cost a reset and two full styles per strip: 160 bytes a tick).
            now = now_column(self._pushes, width)
            axis = "|" + "-" * (width - 2) + ">"
            if now is not None:
                axis = axis[:now] + NOW_MARK + axis[now + 1 :]
            # One segment per strip: the diff compares each alike-cut segment character by character, so three
            # short runs go out, not one from the first strip's mark to the third's.
            return [Segment(" " * LABEL, _DIM), *(Segment(axis + " " * (VALUE + 1), _DIM) for _ in METRICS)]
        return []
