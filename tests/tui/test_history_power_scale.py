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


async def test_the_kept_columns_draw_what_a_sweep_from_the_samples_draws() -> None:
    """The strips are kept as characters and moved on by one column a push (``GpuHistory._advance``): after every push
    of random samples (gaps, zeros, a new power top, two GPUs, a resize) each line reads as the one swept anew from
    the samples."""
    import random

    from widgets.gpu_history import METRICS, sweep_level

    rng = random.Random(53)
    app = _One()
    async with app.run_test(size=(120, 16)) as pilot:
        chart = app.query_one(GpuHistory)

        def sample() -> float | None:
            return None if rng.random() < 0.1 else rng.choice((0.0, rng.random() * 100))

        for step in range(90):
            if step == 60:
                await pilot.resize_terminal(100, 16)
            power = 800.0 if step == 45 else rng.random() * 600
            chart.push([PipelineHistory(i, (sample(),), (sample(),), (power,)) for i in (0, 1)], 1.0, [700.0, 700.0])
            await pilot.pause()
            width, rows = chart.strip_width(), chart.rows
            for gpu_line in range(2 * rows):
                index, row = gpu_line // rows, gpu_line % rows
                drawn = _text(chart, 1 + gpu_line)
                for block, (name, _style) in enumerate(METRICS):
                    values = chart._series[(index, name)]
                    top = chart._power_top if name == "power" else 100.0
                    x = 4 + block * (width + 7)
                    assert drawn[x : x + width] == sweep_level(values, width, chart._pushes, top, rows, row), (
                        step,
                        name,
                    )


async def test_a_strip_wider_than_the_samples_kept_blanks_what_fell_out() -> None:
    """On a terminal wide enough that a strip has more columns than the samples kept (``KEEP``), the column of a
    sample that fell out of the deque is blank in a sweep from the samples: the kept characters read the same."""
    from widgets.gpu_history import KEEP, sweep_level

    app = _One()
    async with app.run_test(size=(3 * (KEEP + 20) + 4, 4)) as pilot:
        chart = app.query_one(GpuHistory)
        await pilot.pause()
        width = chart.strip_width()
        assert width > KEEP + 1
        for step in range(KEEP + 10):
            chart.push([PipelineHistory(0, (50.0 + step % 40,), (1.0,), (78.0,))], 1.0, [700.0])
            drawn = _text(chart, 1)  # drawn after every push, as the screen does: the kept grid moves on
        values = chart._series[(0, "util")]
        assert drawn[4 : 4 + width] == sweep_level(values, width, chart._pushes, 100.0, chart.rows, 0)


async def test_a_gpu_held_at_full_load_changes_no_strip_cell_and_the_axis_marks_now() -> None:
    """Issue 53: "now" is one lit cell of the time axis under the newest column, not a blank column after it that
    moved with the head (it changed every row of two columns per strip at every tick: most of a busy dashboard's
    bytes). Once a sweep has wrapped, a GPU held at 100 % rewrites its util strip with the same characters."""
    from widgets.gpu_history import NOW_MARK, now_column

    app = _One()
    async with app.run_test(size=(120, 12)) as pilot:
        chart = app.query_one(GpuHistory)
        width = chart.strip_width()
        for _ in range(width + 3):
            chart.push([PipelineHistory(0, (100.0,), (50.0,), (700.0,))], 1.0, [700.0])
        await pilot.pause()
        rows = chart.rows
        before = [_text(chart, y) for y in range(1, rows + 1)]
        chart.push([PipelineHistory(0, (100.0,), (50.0,), (700.0,))], 1.0, [700.0])
        await pilot.pause()
        after = [_text(chart, y) for y in range(1, rows + 1)]
        assert [line[4 : 4 + width] for line in after] == [line[4 : 4 + width] for line in before]
        assert all(set(line[4 : 4 + width]) == {"█"} for line in after)  # no blank column anywhere
        axis = _text(chart, rows + 1)
        lit = [x for x, c in enumerate(axis) if c == NOW_MARK]
        head = now_column(chart._pushes, width)
        assert head == width % width + 3  # the sample pushed last, 4 columns into the second sweep
        # One mark under the newest column of each of the three strips, in the axis's style (no style change: the
        # terminal gets the two characters that moved).
        assert [s.text.count(NOW_MARK) for s in chart.render_line(rows + 1) if NOW_MARK in s.text] == [1, 1, 1]
        assert lit == [4 + block * (width + 7) + head for block in range(3)]
        assert f"util ({width}s per sweep)" in _text(chart, 0)


async def test_a_push_repaints_only_the_cells_it_changed_and_the_screen_reads_as_a_fresh_draw() -> None:
    """Issue 53 (session 25): a push marks dirty only the new column's cells that differ from the last sweep's, the
    values whose text moved and the axis's "now" cells, so an idle GPU's tick renders the axis line and no strip line.
    What the styles cache keeps for the lines left alone must still be what a fresh draw gives, push after push."""
    import random

    from textual.geometry import Region

    rng = random.Random(25)
    app = _One()
    async with app.run_test(size=(120, 16)) as pilot:
        chart = app.query_one(GpuHistory)

        def screen_text(y: int) -> str:  # through the styles cache: a line not marked dirty is its kept strip
            return "".join(s.text for s in chart.render_lines(Region(0, y, chart.size.width, 1))[0])

        for step in range(90):
            held = step >= 40  # the last 50 pushes hold one value: an idle GPU
            util = 3.0 if held else rng.choice((None, 0.0, rng.random() * 100))
            chart.push([PipelineHistory(i, (util,), (10.0,), (78.0 if held else rng.random() * 600,)) for i in (0, 1)],
                       1.0, [700.0, 700.0])  # fmt: skip
            await pilot.pause()
            for y in range(chart.size.height):
                assert screen_text(y) == _text(chart, y), (step, y)
        width = chart.strip_width()
        assert width + 1 < 50  # a whole sweep of the held value is on screen
        chart.push([PipelineHistory(i, (3.0,), (10.0,), (78.0,)) for i in (0, 1)], 1.0, [700.0, 700.0])
        axis = 1 + 2 * chart.rows
        assert {r.y for r in chart._repaint_regions} == {axis}  # the two "now" cells per strip, nothing above
        chart.push([PipelineHistory(i, (3.0,), (10.0,), (80.0 if i else 78.0,)) for i in (0, 1)], 1.0, [700.0, 700.0])
        dirty = {(r.y, r.x) for r in chart._repaint_regions if r.y != axis}
        assert dirty == {(2 * chart.rows, 4 + 2 * (width + 7) + width)}  # GPU 1's power value, on its last row
        await pilot.pause()
        for y in range(chart.size.height):
            assert screen_text(y) == _text(chart, y), y
