"""Throughput or latency of a ramp plotted against concurrency, with the knee marked."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from textual_plotext import PlotextPlot

ChartKind = Literal["throughput", "latency"]

# (step key, legend label) per chart kind
SERIES: dict[str, tuple[tuple[str, str], ...]] = {
    "throughput": (("output_throughput", "output tok/s"), ("total_token_throughput", "total tok/s")),
    "latency": (("mean_ttft_ms", "mean TTFT ms"), ("p99_ttft_ms", "p99 TTFT ms"), ("mean_tpot_ms", "mean TPOT ms")),
}
COLORS = ("cyan", "magenta", "yellow")


class RampChart(PlotextPlot):
    """A plotext chart fed with step dicts (``set_steps``); redraws only when the data changed."""

    DEFAULT_CSS = """
    RampChart { height: 1fr; min-height: 10; border: round $primary-darken-1; }
    """

    def __init__(self, kind: ChartKind, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.kind = kind
        self._key: tuple[Any, ...] | None = None
        self.border_title = "Throughput vs concurrency" if kind == "throughput" else "Latency vs concurrency"

    def set_steps(self, steps: Sequence[dict[str, Any]], knee: int | None) -> None:
        """Plot these steps (any order); ``knee`` draws a vertical marker at that concurrency."""
        rows = sorted(steps, key=lambda s: s["concurrency"])
        key = (tuple((s["concurrency"], *(s.get(k) for k, _ in SERIES[self.kind])) for s in rows), knee)
        if key == self._key:
            return  # same data: skip the rebuild and the repaint
        self._key = key
        plt = self.plt
        plt.clear_data()
        plt.title("")
        xs = [s["concurrency"] for s in rows]
        for (field, label), color in zip(SERIES[self.kind], COLORS, strict=False):
            pts = [(x, s[field]) for x, s in zip(xs, rows, strict=True) if s.get(field) is not None]
            if pts:
                plt.plot([p[0] for p in pts], [p[1] for p in pts], marker="dot", color=color, label=label)
        if knee is not None and xs:
            plt.vline(knee, "red")
            plt.text(f"knee {knee}", knee, 0, color="red")
        if xs:
            plt.xticks(xs, [str(x) for x in xs])
        plt.xlabel("concurrency")
        self.refresh()
