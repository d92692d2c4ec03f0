"""Per-GPU history strips (utilization, VRAM, power) as wide as the pane, time running left to right."""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

from rich.text import Text
from textual.widget import Widget

from amdtop.model import NodeSnapshot

SPARK = "▁▂▃▄▅▆▇█"
KEEP = 600
"""Samples kept per GPU and metric: wider than any terminal's strip."""
METRICS = (("util", "green"), ("vram", "magenta"), ("power", "yellow"))
LABEL = 4  # "  3 "
VALUE = 6  # " 100%" / " 610W"


def spark(values: Sequence[float | None], width: int, top: float) -> str:
    """The last ``width`` values as block characters against ``top``; gaps (unknown values) as spaces."""
    tail = list(values)[-width:]
    chars = [" " if v is None else SPARK[max(0, min(7, int(v / top * 7.999)))] for v in tail]
    return "".join(chars).rjust(width)


def _ago(seconds: float) -> str:
    return f"-{seconds / 60:.0f}m" if seconds >= 120 else f"-{seconds:.0f}s"


class GpuHistory(Widget):
    """Feed it every snapshot with :meth:`push`; it keeps the history and draws one line per GPU.

    Each line holds three strips (utilization %, VRAM used %, power W against the highest power seen), each a third
    of the pane's width; the last line is the time axis. A resize redraws from the kept samples.
    """

    DEFAULT_CSS = """
    GpuHistory { height: auto; }
    """

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self._gpus: list[int] = []
        self._series: dict[tuple[int, str], deque[float | None]] = {}
        self._power_top = 1.0
        self.interval = 1.0
        """Seconds between two pushes (for the time axis)."""

    def push(self, snapshot: NodeSnapshot, interval: float | None = None) -> None:
        if interval is not None:
            self.interval = interval
        gpus = [g.index for g in snapshot.topology.gpus]
        if gpus != self._gpus:
            self._gpus = gpus
            self.refresh(layout=True)
        for index in gpus:
            s = snapshot.sample(index)
            ok = s is not None and not s.lost
            util = s.util_pct if ok and s is not None else None
            vram = (
                100.0 * s.vram_used_bytes / s.vram_total_bytes
                if ok and s is not None and s.vram_used_bytes is not None and s.vram_total_bytes
                else None
            )
            power = s.power_w if ok and s is not None else None
            if power is not None:
                self._power_top = max(self._power_top, power)
            for key, value in (("util", util), ("vram", vram), ("power", power)):
                self._series.setdefault((index, key), deque(maxlen=KEEP)).append(value)
        self.refresh()

    def get_content_height(self, container: object, viewport: object, width: int) -> int:
        return len(self._gpus) + 2 if self._gpus else 1

    def strip_width(self) -> int:
        return max(4, (self.size.width - LABEL) // len(METRICS) - VALUE - 1)

    def render(self) -> Text:
        if not self._gpus:
            return Text("No GPU history yet.", style="dim")
        width = self.strip_width()
        head = Text(" " * LABEL)
        for name, style in METRICS:
            top = "" if name != "power" else f" (top {self._power_top:.0f}W)"
            head.append(f"{name}{top}".ljust(width + VALUE + 1), style=f"bold {style}")
        lines = [head]
        for index in self._gpus:
            line = Text(f"{index:>3} ", style="bold")
            for name, style in METRICS:
                values = self._series.get((index, name), ())
                top = self._power_top if name == "power" else 100.0
                line.append(spark(values, width, top), style=style)
                last = values[-1] if values else None
                unit = "W" if name == "power" else "%"
                line.append(("   N/A" if last is None else f"{last:5.0f}{unit}").ljust(VALUE) + " ")
            lines.append(line)
        axis = Text(" " * LABEL, style="dim")
        span = _ago(width * self.interval)
        for _ in METRICS:
            axis.append(f"{span}{'now'.rjust(width - len(span))}".ljust(width + VALUE + 1))
        lines.append(axis)
        return Text("\n").join(lines)
