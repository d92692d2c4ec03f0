"""The history's power chart is drawn against the GPUs' power cap where the node knows it (nvtop's scale), and only
grows past it: an idle H200 (78 of 700 W) is a low line, not full columns scaled to the highest power seen."""

from __future__ import annotations

from textual.app import App, ComposeResult

from amdtop.pipeline.frame import GpuHistory as PipelineHistory
from widgets.gpu_history import GpuHistory


class _One(App[None]):
    def compose(self) -> ComposeResult:
        yield GpuHistory(id="h")


def _text(widget: GpuHistory, y: int) -> str:
    return "".join(s.text for s in widget.render_line(y))


async def test_power_is_drawn_against_the_cap_and_grows_only_past_it() -> None:
    app = _One()
    async with app.run_test(size=(120, 12)) as pilot:
        chart = app.query_one(GpuHistory)
        for _ in range(3):
            chart.push([PipelineHistory(0, (0.0,), (1.0,), (78.0,))], 1.0, [700.0])
        await pilot.pause()
        assert "power (top 700W)" in _text(chart, 0)
        body = "".join(_text(chart, y) for y in range(1, chart.rows + 1))
        assert "█" not in body  # 78 of 700 W fills no cell of the chart
        chart.push([PipelineHistory(0, (0.0,), (1.0,), (760.0,))], 1.0, [700.0])  # over the cap: the top follows
        await pilot.pause()
        assert "power (top 760W)" in _text(chart, 0)
    unknown = _One()
    async with unknown.run_test(size=(120, 12)) as pilot:
        chart = unknown.query_one(GpuHistory)
        chart.push([PipelineHistory(0, (0.0,), (1.0,), (78.0,))], 1.0, [None])  # no cap known: the highest seen
        await pilot.pause()
        assert "power (top 78W)" in _text(chart, 0)
