"""amdtop leans on two private parts of Textual for terminal bytes and CPU; these fail, by name, when they move.

(The tables no longer override ``DataTable`` internals: ``widgets/row_table.py`` draws through the public line API.)

- ``tui/tty_crop.py``: ``ChopsUpdate.render_segments`` (partial updates cropped to the changed cells, against a
  shadow of the screen that ``LayoutUpdate``/``InlineUpdate.render_segments`` empty) and ``Compositor.render_partial_update``
  (only the chops a partial update writes are rendered).
- ``tui/input_driver.py``: ``LinuxDriver.run_input_thread`` (an input thread that sleeps until a key, not 10 Hz).
"""

from __future__ import annotations

import inspect
import os
import selectors
import threading
import time
from importlib.metadata import version
from typing import Any

from rich.console import Console
from rich.segment import Segment
from textual import _compositor
from textual.strip import Strip

from tui import input_driver, tty_crop

TEXTUAL = version("textual")
WHY = f"textual {TEXTUAL}: amdtop was written against {tty_crop.PATCHED_FOR}; re-check and re-measure (docs/benchmarks.md)"


def test_textual_version_is_the_one_patched() -> None:
    assert TEXTUAL == tty_crop.PATCHED_FOR == input_driver.PATCHED_FOR, WHY
    assert version("rich") == tty_crop.RICH_FOR, f"rich {version('rich')}: tui/tty_crop.py reads Console._color_system"


def test_private_parts_fail_closed_to_textuals_own_path(monkeypatch: Any) -> None:
    """A moved private module or attribute leaves Textual's own driver and partial updates in place."""

    def gone() -> Any:
        raise ImportError("textual._xterm_parser moved")

    monkeypatch.setattr(input_driver, "_built", None)
    monkeypatch.setattr(input_driver, "_build", gone)
    assert input_driver.driver_class() is None
    monkeypatch.setattr(input_driver, "version", lambda name: "9.0.0")
    assert input_driver.driver_class() is None

    monkeypatch.setattr(tty_crop, "_installed", None)
    monkeypatch.setattr(tty_crop, "_ORIGINAL", None)
    monkeypatch.delattr(_compositor, "ChopsUpdate")
    assert tty_crop.install() is False
    monkeypatch.undo()
    monkeypatch.setattr(tty_crop, "_installed", None)
    monkeypatch.setattr(tty_crop, "version", lambda name: "15.1.0" if name == "rich" else tty_crop.PATCHED_FOR)
    assert tty_crop.install() is False  # an unchecked Rich: not patched


def test_compositor_patch_is_installed_once_when_the_app_is_built() -> None:
    from tests.tui.conftest import make_app

    make_app()
    assert tty_crop.install() is True
    assert _compositor.ChopsUpdate.render_segments is tty_crop.render_segments
    assert tty_crop.original() is not tty_crop.render_segments


def test_partial_update_is_cropped_to_the_changed_cells() -> None:
    assert "TODO: crop to x extents" in inspect.getsource(_compositor.ChopsUpdate), (
        f"{WHY}: Textual's partial update changed; tui/tty_crop.py may be unneeded or wrong"
    )
    strip = Strip([Segment("0123"), Segment("456"), Segment("789")])
    update = _compositor.ChopsUpdate([{0: strip}], [(0, 4, 7)], [[10]])
    console = Console(width=20, legacy_windows=False, force_terminal=True, color_system=None)
    textual_out = tty_crop.original()(update, console)
    assert textual_out.endswith("0123456")  # Textual's own: from the strip's start up to the span's end
    # First sight of the chop: all of it (then the shadow knows the line); after that, the changed cells only.
    assert tty_crop.render_segments(update, console) == "\x1b[1;1H0123456789"
    strip = Strip([Segment("0123"), Segment("ABC"), Segment("789")])
    update = _compositor.ChopsUpdate([{0: strip}], [(0, 4, 7)], [[10]])
    assert tty_crop.render_segments(update, console) == "\x1b[1;5HABC"
    assert tty_crop.install()
    assert _compositor.ChopsUpdate.render_segments is tty_crop.render_segments


def test_unchanged_cells_are_not_sent_again() -> None:
    # The shadow: a line that comes out the same is not written again; a changed one from its first changed segment
    # to its last; a full repaint empties it, so the next partial update writes everything it covers.
    tty_crop.install()
    console = Console(width=20, legacy_windows=False, force_terminal=True, color_system=None)

    def chops(*segments: str) -> Any:
        strip = Strip([Segment(text) for text in segments])
        return _compositor.ChopsUpdate([{0: strip}], [(0, 0, 12)], [[12]])

    assert chops("GPU ", "0.0%", " idle").render_segments(console) == "\x1b[1;1HGPU 0.0% idle"
    assert chops("GPU ", "0.0%", " idle").render_segments(console) == ""  # the same line: nothing
    assert chops("GPU ", "7.5%", " idle").render_segments(console) == "\x1b[1;5H7.5"  # the changed cells only
    assert tty_crop.changed_runs([Segment("ab"), Segment("cd")], [Segment("ab"), Segment("cd")]) == []
    assert tty_crop.changed_runs([Segment("ab"), Segment("cd")], [Segment("xb"), Segment("cd")]) == [(0, 1)]
    full = _compositor.LayoutUpdate([[Strip([Segment("GPU 7.5% idle")])]], _compositor.Region(0, 0, 12, 1))
    full.render_segments(console)
    assert not tty_crop.shadow_of(console)
    assert chops("GPU ", "7.5%", " idle").render_segments(console) == "\x1b[1;1HGPU 7.5% idle"
    other = Console(width=20, legacy_windows=False, force_terminal=True, color_system=None)
    assert chops("GPU ", "7.5%", " idle").render_segments(other) != ""  # one shadow per console (per app)


def test_changed_runs_turn_the_old_line_into_the_new() -> None:
    # Property: writing the runs of the new line over the old one gives the new line, cell for cell and style for
    # style, for random lines of narrow and wide characters in a few styles, cut into segments at random.
    import itertools
    import random

    from rich.style import Style

    rng = random.Random(7)
    styles = [None, Style(color="red"), Style(bold=True)]

    def cells(segments: list[Segment]) -> list[tuple[str, Any]]:
        out: list[tuple[str, Any]] = []
        for seg in segments:
            for ch in seg.text:
                out += [(ch, seg.style)] + [("", seg.style)] * (2 - 1 if ch == "界" else 0)
        return out

    def line(chars: list[tuple[str, Any]]) -> list[Segment]:
        segments, i = [], 0
        while i < len(chars):
            n, style = rng.randint(1, 6), chars[i][1]
            group = list(itertools.takewhile(lambda c, st=style: c[1] == st, chars[i : i + n]))
            segments.append(Segment("".join(c[0] for c in group), style))
            i += len(group)
        return segments

    for _ in range(400):
        base = [(rng.choice("ab ▁█"), rng.choice(styles)) for _ in range(30)]
        new_chars = [(rng.choice("ab ▁█") if rng.random() < 0.15 else c, st if rng.random() < 0.9 else rng.choice(styles)) for c, st in base]  # fmt: skip
        if rng.random() < 0.3:
            k = rng.randrange(0, 28)
            new_chars[k : k + 2] = [("界", new_chars[k][1])]  # a wide character takes two cells
        old_segs, new_segs = line(base), line(new_chars)
        screen, want = cells(old_segs), cells(new_segs)
        assert len(screen) == 30 and len(want) == 30
        for start, end in tty_crop.changed_runs(old_segs, new_segs):
            screen[start:end] = want[start:end]
        assert screen == want, (old_segs, new_segs, tty_crop.changed_runs(old_segs, new_segs))


async def test_chops_of_the_written_spans_match_textuals_own() -> None:
    # tty_crop.render_partial_update renders only the chops a partial update writes; each chop a dirty span touches
    # must come out exactly as Textual's own partial update makes it, on the real dashboard (every pane, borders,
    # scrollbars, the footer), and the spans must be Textual's.
    from textual.geometry import Region

    from tests.tui.conftest import make_app, settle

    app = make_app()
    async with app.run_test(size=(200, 50)) as pilot:
        await pilot.pause()
        app.step(3)
        await settle(pilot)
        compositor = app.screen._compositor
        own = tty_crop._ORIGINALS["render_partial_update"]
        cases = [
            [Region(190, 0, 10, 1)],  # the header clock
            [Region(0, 0, 200, 1), Region(0, 49, 200, 1)],
            [Region(3, 3, 40, 3), Region(120, 30, 5, 1)],
            [Region(x, y, 7, 2) for x, y in ((0, 0), (50, 7), (100, 14), (150, 21), (193, 48))],
            [Region(10, 2, 120, 30)],
            [Region(0, 0, 200, 50)],
        ]
        for regions in cases:
            compositor._dirty_regions.update(regions)
            mine = tty_crop.render_partial_update(compositor)
            compositor._dirty_regions.update(regions)
            theirs = own(compositor)
            assert mine.spans == theirs.spans, regions
            written = 0
            for y, x1, x2 in theirs.spans:
                for end, (x, strip) in zip(theirs.chop_ends[y], theirs.chops[y].items(), strict=False):
                    if strip is None or x > x2 or end <= x1:
                        continue
                    assert mine.chops[y][x] is not None, (regions, y, x)
                    assert list(mine.chops[y][x]) == list(strip), (regions, y, x)
                    written += 1
            assert written >= len(theirs.spans)  # every dirty line was drawn


def test_cropped_pieces_render_as_crop_then_render() -> None:
    # The pen writes cells [start, end) from these pieces without building the cropped Strip (seven caches a Strip):
    # rendered one by one they are exactly Textual's crop-then-render, wide characters cut at either edge included.
    from rich.style import Style

    console = Console(width=40, legacy_windows=False, force_terminal=True, color_system="truecolor")
    red, bold = Style(color="red"), Style(bold=True)
    strip = Strip([Segment("ab", red), Segment("界x", bold), Segment("  ", None), Segment("yz", red)])
    for start in range(strip.cell_length + 1):
        for end in range(start, strip.cell_length + 2):
            ours = "".join(
                text if style is None else Strip.render_style(style, text, color_system=console._color_system)
                for style, text in tty_crop.cropped(strip, start, end)
            )
            assert ours == strip.crop(start, end).render(console), (start, end)


_QUIET = input_driver.driver_class()
assert _QUIET is not None, WHY


class _Recorder(_QUIET):  # type: ignore[misc,valid-type]
    """The quiet driver reading a pipe instead of the terminal, keeping what it would send to the app."""

    def __init__(self, app: Any, fd: int) -> None:
        super().__init__(app)
        self.fileno = fd
        self.got: list[Any] = []

    def process_message(self, message: Any) -> None:
        self.got.append(message)


async def test_input_thread_sleeps_until_a_key_and_still_times_out_a_lone_esc(monkeypatch: Any) -> None:
    from textual import events
    from textual.app import App
    from textual.drivers.linux_driver import LinuxDriver

    assert "selector.select(0.1)" in inspect.getsource(LinuxDriver.run_input_thread), (
        f"{WHY}: Textual's input loop no longer polls every 0.1 s; tui/input_driver.py may be unneeded or wrong"
    )
    selects: list[float | None] = []
    real_select = selectors.SelectSelector.select

    def counted(self: Any, timeout: float | None = None) -> Any:
        selects.append(timeout)
        return real_select(self, timeout)

    monkeypatch.setattr(selectors.SelectSelector, "select", counted)
    read_fd, write_fd = os.pipe()
    driver = _Recorder(App(), read_fd)
    thread = threading.Thread(target=driver.run_input_thread, daemon=True)
    thread.start()
    try:
        time.sleep(1.0)
        assert len(selects) <= 1, selects  # asleep with no timeout, not ten wakeups a second
        os.write(write_fd, b"q")
        time.sleep(0.3)
        assert [m.key for m in driver.got if isinstance(m, events.Key)] == ["q"]
        os.write(write_fd, b"\x1b")  # a lone Esc becomes a key only when the parser's deadline passes
        time.sleep(0.5)
        assert [m.key for m in driver.got if isinstance(m, events.Key)] == ["q", "escape"]
        assert any(t is not None for t in selects), selects  # it waited for that deadline, not forever
        started = time.monotonic()
        driver.exit_event.set()
        thread.join(2.0)
        assert not thread.is_alive() and time.monotonic() - started < 1.0  # exit wakes it at once
    finally:
        driver.exit_event.set()
        thread.join(2.0)
        driver.close()
        os.close(read_fd)
        os.close(write_fd)


async def test_a_frame_repaints_its_panes_from_its_handler() -> None:
    # tui/repaint.py draws the panes a frame changed right after the frame (not three message hops later): the clock
    # and the panes go that way, and nothing is left waiting for Textual's timer. What reaches the terminal through
    # it is checked in tmux against a full repaint (tests/tui/test_tmux.py, cropped partial updates).
    import tui.screens.dashboard as dashboard
    from tests.tui.conftest import make_app, settle
    from tui import repaint

    app = make_app()
    counts: list[int] = []

    def counting(screen: Any, widgets: Any) -> int:
        counts.append(repaint.repaint_now(screen, widgets))
        return counts[-1]

    async with app.run_test(size=(200, 50)) as pilot:
        app.step(2)  # the first frames lay the tables out (rows arrive): Textual's own path
        await settle(pilot)
        dashboard.repaint_now = counting  # type: ignore[assignment]
        try:
            for _ in range(4):
                app.step()
                board = app.dashboard
                # The clock and the history change every frame and were drawn by it (a pane refreshed later, or
                # one that needs a layout, is left to Textual's own path).
                drawn = [w for w in board._tick_widgets if w.id in ("clock", "pane-history")]
                assert not any(w._repaint_required or w._repaint_regions for w in drawn)
                await pilot.pause()
        finally:
            dashboard.repaint_now = repaint.repaint_now
    assert len(counts) == 4 and min(counts) >= 2, counts  # the clock and the history at least, every frame


def test_repaint_leaves_textuals_path_when_a_part_is_missing() -> None:
    from tui import repaint

    class Bare:
        _repaint_required = True
        is_attached = True
        display = True

    widget = Bare()
    assert repaint.repaint_now(object(), [widget]) == 0
    assert widget._repaint_required  # untouched: Textual's own idle handler still repaints it


MOVES_AND_CELLS = r"\x1b\[[0-9;]*[mHABCDG]|\x08|[^\x1b]"
"""An update's tokens as a terminal reads them: SGR, the cursor moves tty_crop writes (absolute, up, down, right,
left, to a column, backspace), one character."""


def _cells_seen(output: str) -> list[tuple[str, tuple[tuple[str, str], ...]]]:
    """What a terminal shows for ``output`` (one line, cursor moves to columns of row 1): each written character with
    the SGR state it was written in (fg, bg, attributes), read code by code as a terminal does."""
    import re

    state: dict[str, str] = {}
    seen: list[tuple[str, tuple[tuple[str, str], ...]]] = []
    for token in re.findall(MOVES_AND_CELLS, output):
        if token == "\b" or (token.startswith("\x1b[") and not token.endswith("m")):
            continue  # a cursor move
        if not token.startswith("\x1b["):
            seen.append((token, tuple(sorted(state.items()))))
            continue
        codes = token[2:-1].split(";") if token[2:-1] else ["0"]
        i = 0
        while i < len(codes):
            code = codes[i]
            if code == "0":
                state.clear()
            elif code in ("38", "48"):
                n = 3 if codes[i + 1] == "5" else 5
                state["fg" if code == "38" else "bg"] = ";".join(codes[i : i + n])
                i += n - 1
            elif code == "39":
                state.pop("fg", None)
            elif code == "49":
                state.pop("bg", None)
            elif code.isdigit() and (30 <= int(code) <= 37 or 90 <= int(code) <= 97):
                state["fg"] = code
            elif code.isdigit() and (40 <= int(code) <= 47 or 100 <= int(code) <= 107):
                state["bg"] = code
            else:
                state[f"attr{code}"] = code
            i += 1
    return seen


def test_the_pen_shows_what_textual_shows_in_fewer_bytes() -> None:
    """Styles left on across writes (issue 34: two thirds of a tick's bytes were repeated styles and resets): every
    character ends up in the same colours and attributes as Textual's own rendering, and the terminal is left reset."""
    from rich.style import Style

    console = Console(width=40, legacy_windows=False, force_terminal=True, color_system="256")
    green, orange = Style(color="color(112)", bgcolor="color(233)"), Style(color="color(208)", bgcolor="color(233)")
    bold, plain_bg = Style(bold=True, color="color(112)"), Style(bgcolor="color(17)")
    strips = [
        Strip([Segment("▆", green), Segment("█", orange), Segment("x", orange), Segment("y", None)]),
        Strip([Segment("ab", bold), Segment("c", green), Segment("d", plain_bg), Segment("e", Style())]),
        Strip([Segment("1", green), Segment("2", green), Segment("3", bold), Segment("4", orange)]),
    ]
    ours: list[str] = []
    pen = tty_crop.Pen(ours.append, console)
    theirs = []
    for x, strip in enumerate(strips):
        ours.append(f"\x1b[1;{10 * x + 1}H")
        pen.cells(strip, 0, strip.cell_length)
        theirs.append(f"\x1b[1;{10 * x + 1}H" + strip.render(console))
    pen.close()
    out, textual = "".join(ours), "".join(theirs)
    assert _cells_seen(out) == _cells_seen(textual)
    assert out.endswith("\x1b[0m") and len(out) < len(textual)
    # Two cells differing in the foreground only: the second sends that colour alone.
    assert "█\x1b[38;5;208m" not in out and "▆\x1b[38;5;208m█" in out


def test_runs_that_start_in_one_style_go_together() -> None:
    """A history tick: on each of two rows a green and an orange cell change. Textual's order switches colour at every
    cell; the update sends the green ones, then the orange ones, and the terminal shows the same cells."""
    from rich.style import Style

    tty_crop.install()
    console = Console(width=20, legacy_windows=False, force_terminal=True, color_system="256")
    green, orange = Style(color="color(112)", bgcolor="color(233)"), Style(color="color(208)", bgcolor="color(233)")
    chops = [{0: Strip([Segment("▆", green)]), 10: Strip([Segment("█", orange)])} for _ in range(2)]
    update = _compositor.ChopsUpdate(chops, [(0, 0, 11), (1, 0, 11)], [[1, 11], [1, 11]])
    out = tty_crop.render_segments(
        update, Console(width=20, legacy_windows=False, force_terminal=True, color_system="256")
    )
    textual = tty_crop.original()(update, console)
    assert out.rindex("▆") < out.index("█")  # both greens first
    assert out.count("\x1b[38;5;208") == 1 and out.count("\x1b[38;5;112") == 1
    seen = {(r, c): cell for r, c in ((1, 1), (1, 11), (2, 1), (2, 11)) for cell in [_at(out, r, c)]}
    assert seen == {(r, c): _at(textual, r, c) for r, c in seen}


def _at(output: str, row: int, col: int) -> tuple[str, tuple[tuple[str, str], ...]]:
    """The character written last at (row, col), with the SGR state a terminal applies to it."""
    import re

    styles = ""  # every SGR sequence so far: the state is what they leave, read by _cells_seen
    r = c = 1
    found: tuple[str, tuple[tuple[str, str], ...]] = ("", ())
    for token in re.findall(MOVES_AND_CELLS, output):
        count = int(token[2:-1] or 1) if token.startswith("\x1b[") and token[-1] in "ABCDG" else 1
        if token.endswith("H") and token.startswith("\x1b["):
            r, c = (int(n) for n in token[2:-1].split(";"))
        elif token == "\b":
            c -= 1
        elif token.startswith("\x1b[") and token[-1] in "ABCDG":
            r, c = {
                "A": (r - count, c),
                "B": (r + count, c),
                "C": (r, c + count),
                "D": (r, c - count),
                "G": (r, count),
            }[token[-1]]
        elif token.startswith("\x1b["):
            styles += token
        else:
            if (r, c) == (row, col):
                found = (token, _cells_seen(styles + token)[-1][1])
            c += 1
    return found


def test_a_column_of_runs_moves_down_and_back_not_to_each_row() -> None:
    """A history tick writes two cells on each of six rows at one column: after the first absolute move each next row
    is one row down and two cells back (5 bytes, not 7-9), and the terminal shows the cells Textual's own update
    shows. A run that ends on the line's last column leaves the cursor where terminals differ: the next move is
    absolute."""
    from rich.style import Style

    tty_crop.install()
    console = Console(width=20, legacy_windows=False, force_terminal=True, color_system="256")
    green = Style(color="color(112)", bgcolor="color(233)")
    chops = [{0: None, 4: Strip([Segment("█ ", green)]), 6: None} for _ in range(6)]
    update = _compositor.ChopsUpdate(chops, [(y, 4, 6) for y in range(6)], [[4, 6, 20]] * 6)
    fresh = Console(width=20, legacy_windows=False, force_terminal=True, color_system="256")
    out = tty_crop.render_segments(update, fresh)
    textual = tty_crop.original()(update, console).replace("\n", "")  # each row's write moves there anyway
    assert out.count("H") == 1 and out.count("\x1b[B\b\b") == 5
    cells = [(r, c) for r in range(1, 7) for c in (5, 6)]
    assert [_at(out, r, c) for r, c in cells] == [_at(textual, r, c) for r, c in cells]
    assert len(out) < len(textual)
    # To the line's end: the next row's move is absolute.
    chops = [{0: None, 18: Strip([Segment("█ ", green)])} for _ in range(2)]
    update = _compositor.ChopsUpdate(chops, [(y, 18, 19) for y in range(2)], [[18, 20]] * 2)
    out = tty_crop.render_segments(update, Console(width=20, legacy_windows=False, force_terminal=True))
    assert "\x1b[1;19H" in out and "\x1b[2;19H" in out
    assert tty_crop.move(None, 3, 4) == "\x1b[4;5H"
    assert tty_crop.move((3, 4), 3, 4) == ""
    assert tty_crop.move((0, 150), 3, 4) == "\x1b[4;5H"  # nothing relative is shorter
    assert tty_crop.move((3, 150), 3, 4) == "\x1b[5G"


def test_after_a_character_terminals_count_differently_the_next_move_is_absolute() -> None:
    """A run holding a character whose width terminals disagree on (an emoji with a variation selector, from a
    process name or a log line) leaves the cursor where the terminal put it, not where the cells counted say: the
    next move is absolute, as Textual's own moves are; a run of amdtop's own cells (ASCII, blocks) is moved on from."""
    from rich.style import Style

    tty_crop.install()
    green = Style(color="color(112)")
    for text, relative in (("⚠️ ", False), ("e\u0301 ", False), ("█▂", True), ("a·", True)):
        chops = [{0: None, 4: Strip([Segment(text, green)]), 6: None} for _ in range(2)]
        update = _compositor.ChopsUpdate(chops, [(y, 4, 6) for y in range(2)], [[4, 6, 20]] * 2)
        out = tty_crop.render_segments(update, Console(width=20, legacy_windows=False, force_terminal=True))
        assert ("\x1b[2;5H" not in out) is relative, (text, out)
        assert out.count("\x1b[1;5H") == 1
