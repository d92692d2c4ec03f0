"""Where each dashboard pane goes at a terminal size: a pure plan from the panes' needs (no Textual here).

The dashboard is a stack of bands (GPUs beside the topology; the history beside TP groups over NUMA; workers; logs;
processes). Every shown pane gets at least its header and three rows (or all it has); when the bands' minimums do not
fit, panes are folded, least useful first, into one tabbed slot at the bottom that shows one of them at a time. Space
left once every pane has its minimum goes to the panes that still have rows to show, in order of use, so no block
stays empty while a pane is cut: first only as far as no pane beside the grown one gets empty lines, then the rest. What
is left once every pane shows all it has goes to the log tail when it has lines; otherwise (a node with no worker, such
as one GPU and its processes) the process list takes it (not the history: taller charts cost a taller redraw each
tick). A zoomed pane takes the whole body.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

CHROME = 2
"""A pane's border: one line above, one below (and one column each side)."""
TABS = 1
"""The tab strip over the folded slot."""
FOLD_ORDER = ("history", "numa", "logs", "topo", "groups", "procs", "workers")
"""Folded first to last when the panes do not fit (the GPU table always stays: the slot shows one of the rest)."""
GROW_ORDER = ("gpus", "workers", "topo", "groups", "procs", "numa", "logs", "history")
"""Who gets space beyond its minimum first."""
SINK_ORDER = ("logs", "procs", "history", "groups", "workers", "gpus")
"""Who takes what is left once every pane shows all it has (a taller log tail, more process rows)."""
SHARE = ("procs",)
"""Who takes what is left when the log tail has no line to show: room for more processes. Not the history: a chart
taller than its need redraws a taller column each tick (on the H200 replay at 200x50, 15 chart lines instead of 5 cost
1.0 % of a core against 0.65 %, and 528 against 293 tty bytes/s); zoomed (8 twice), it takes the whole screen."""
SLOT_ORDER = ("procs", "logs", "workers", "groups", "topo", "numa", "history", "gpus")
"""Which folded pane the slot shows when none was picked."""
SLOT_ROWS = 4
"""Most lines the tab slot keeps for its pane's floor (a header and three rows)."""
SIDE_BY_SIDE_MIN = 48
"""Narrowest a pane may be beside another; below it the two stack."""


@dataclass(frozen=True, slots=True)
class Rect:
    """A pane's outer box in the body's cells."""

    x: int
    y: int
    w: int
    h: int


@dataclass(frozen=True, slots=True)
class Need:
    """Content lines a pane has at some inner width (its header included), and its floor: header and three rows, or
    all of them when fewer."""

    want: int
    least: int
    grows: bool = False
    """It shows more in more lines than it wants (a log tail that has lines): the one to take what is left."""


NeedOf = Callable[[str, int], Need]
"""(pane key, inner width) -> its need: the screen measures its widgets."""


@dataclass(frozen=True, slots=True)
class Plan:
    """Boxes of the shown panes; the folded ones share ``slot`` under the tab strip ``tabs``."""

    rects: dict[str, Rect] = field(default_factory=dict)
    folded: tuple[str, ...] = ()
    tabs: Rect | None = None
    slot_pane: str | None = None

    @property
    def shown(self) -> tuple[str, ...]:
        return tuple(self.rects)


@dataclass(slots=True)
class _Column:
    x: int
    w: int
    keys: tuple[str, ...]
    needs: list[Need] = field(default_factory=list)

    @property
    def least(self) -> int:
        return sum(n.least + CHROME for n in self.needs)

    @property
    def want(self) -> int:
        return sum(n.want + CHROME for n in self.needs)


@dataclass(slots=True)
class _Band:
    columns: list[_Column]
    height: int = 0

    @property
    def keys(self) -> tuple[str, ...]:
        return tuple(k for c in self.columns for k in c.keys)

    @property
    def least(self) -> int:
        return max(c.least for c in self.columns)

    @property
    def want(self) -> int:
        return max(c.want for c in self.columns)

    @property
    def even(self) -> int:
        """Tallest it may be before a column beside another gets empty lines (the shortest column's want)."""
        return max(self.least, min(c.want for c in self.columns))


@dataclass(frozen=True, slots=True)
class Widths:
    """Outer widths the side-by-side bands are cut from."""

    gpus: int = 80
    """The GPU table with every column."""
    gpus_core: int = 72
    """The GPU table without its last column (the history sparkline, the first to scroll off)."""
    topo: int = 60
    """The matrix at a comfortable level (``XG1`` cells, CPU affinity shown)."""
    topo_min: int = 30
    """The matrix at its most abbreviated level: narrower cuts cells."""
    side: int = 48
    """The TP groups / NUMA column beside the history."""


def _bands(width: int, shown: Sequence[str], widths: Widths) -> list[_Band]:
    """Bands of the shown panes, top to bottom (widths fixed; heights come later)."""
    bands: list[_Band] = []

    def full(*keys: str) -> None:
        for key in keys:
            if key in shown:
                bands.append(_Band([_Column(0, width, (key,))]))

    def pair(
        left: tuple[str, ...],
        right: tuple[str, ...],
        left_w: int,
        right_min: int = SIDE_BY_SIDE_MIN,
        left_min: int = SIDE_BY_SIDE_MIN,
    ) -> None:
        left = tuple(k for k in left if k in shown)
        right = tuple(k for k in right if k in shown)
        if left and right and left_min <= left_w <= width - right_min:
            bands.append(_Band([_Column(0, left_w, left), _Column(left_w, width - left_w, right)]))
        else:
            full(*left, *right)

    # GPUs at their table's width, the matrix beside them with the rest; the GPU table gives up its last column
    # before the matrix abbreviates past its comfortable level, and the matrix abbreviates down to its narrowest.
    gpus = max(widths.gpus_core, min(widths.gpus, width - widths.topo))
    pair(("gpus",), ("topo",), min(gpus, width - widths.topo_min), widths.topo_min, widths.gpus_core)
    if "history" in shown:
        pair(("history",), ("groups", "numa"), width - max(widths.side, width * 2 // 5))
    else:
        pair(("groups",), ("numa",), width // 2)
    full("workers", "logs", "procs")
    return bands


def _fill(column: _Column, height: int) -> list[int]:
    """Heights of a column's stacked panes in ``height`` lines: each its floor, then toward what it wants, in grow
    order; the rest to the last."""
    heights = [n.least + CHROME for n in column.needs]
    spare = height - sum(heights)
    for key in sorted(column.keys, key=GROW_ORDER.index):
        i = column.keys.index(key)
        more = min(spare, column.needs[i].want + CHROME - heights[i])
        if more > 0:
            heights[i] += more
            spare -= more
    heights[-1] += max(0, spare)
    return heights


def _sink(bands: list[_Band], spare: int) -> None:
    """Give what is left once every pane shows all it has: to the log tail when it has lines to show, else to the
    process list, else to the first of the sink order."""

    def band_of(key: str) -> _Band | None:
        return next((b for b in bands if key in b.keys), None)

    logs = band_of("logs")
    if logs is not None and any(n.grows for c in logs.columns for n in c.needs):
        logs.height += spare
        return
    sharing = [b for b in (band_of(k) for k in SHARE) if b is not None]
    if not sharing:
        sharing = [next((b for key in SINK_ORDER for b in bands if key in b.keys), bands[-1])]
    for i, band in enumerate(sharing):
        band.height += spare // len(sharing) + (1 if i < spare % len(sharing) else 0)


def plan(
    width: int,
    height: int,
    need: NeedOf,
    *,
    panes: Sequence[str],
    widths: Widths,
    zoom: str | None = None,
    pick: str | None = None,
) -> Plan:
    """Place ``panes`` in a ``width`` x ``height`` body.

    ``widths``: what the side-by-side panes need. ``zoom``: one pane over the whole body. ``pick``: the folded pane the
    slot shows (when folded).
    """
    if zoom is not None and zoom in panes:
        return Plan({zoom: Rect(0, 0, width, height)})
    order = [k for k in FOLD_ORDER if k in panes]
    bands: list[_Band] = []
    folded: tuple[str, ...] = ()
    slot_least = 0
    for count in range(len(order) + 1):
        folded = tuple(order[:count])
        shown = [k for k in panes if k not in folded]
        bands = _bands(width, shown, widths)
        for band in bands:
            for col in band.columns:
                col.needs = [need(k, max(1, col.w - CHROME)) for k in col.keys]
        slot_least = 0
        if folded:
            # In the slot a pane may be cut (the matrix too): it has the slot to itself when picked, and zooms.
            floor = max(min(need(k, max(1, width - CHROME)).least, SLOT_ROWS) for k in folded)
            slot_least = TABS + CHROME + floor
        if sum(b.least for b in bands) + slot_least <= height:
            break
    for band in bands:
        band.height = band.least
    spare = height - sum(b.height for b in bands) - slot_least
    # Grow bands toward what their panes have, the most useful first: first only as far as the shortest column wants
    # (a pane beside a taller one would get empty lines while a pane further down still hides rows), then the rest.
    targets: tuple[Callable[[_Band], int], ...] = (lambda b: b.even, lambda b: b.want)
    for target in targets:
        for key in GROW_ORDER:
            for band in bands:
                if key in band.keys and spare > 0:
                    more = min(spare, target(band) - band.height)
                    if more > 0:
                        band.height += more
                        spare -= more
    slot_h = slot_least
    if folded:
        slot_h += spare  # the folded panes have more to show than the space left: the slot takes it
    elif bands:
        _sink(bands, spare)
    rects: dict[str, Rect] = {}
    y = 0
    for band in bands:
        for col in band.columns:
            top = y
            for key, h in zip(col.keys, _fill(col, band.height), strict=True):
                rects[key] = Rect(col.x, top, col.w, h)
                top += h
        y += band.height
    if not folded:
        return Plan(rects)
    slot_pane = pick if pick in folded else next(k for k in SLOT_ORDER if k in folded)
    rects[slot_pane] = Rect(0, y + TABS, width, slot_h - TABS)
    return Plan(rects, folded, Rect(0, y, width, TABS), slot_pane)
