"""tui.layout's plan as a pure function of the panes' needs and the body's size."""

from __future__ import annotations

from tui.layout import CHROME, FOLD_ORDER, Need, Rect, Widths, plan

PANES = ("gpus", "topo", "groups", "numa", "workers", "logs", "procs", "history")
WANTS = {"gpus": 9, "topo": 11, "groups": 6, "numa": 5, "workers": 4, "logs": 12, "procs": 15, "history": 10}
WIDTHS = Widths(gpus=87, gpus_core=73, topo=76, topo_min=31)


def need(key: str, width: int) -> Need:
    want = WANTS[key]
    return Need(want, want if key == "topo" else min(want, 4))


def _area(p: object) -> int:
    rects = list(p.rects.values()) + ([p.tabs] if p.tabs else [])  # type: ignore[attr-defined]
    return sum(r.w * r.h for r in rects)


def test_everything_fits_on_a_tall_terminal() -> None:
    p = plan(250, 90, need, panes=PANES, widths=WIDTHS)
    assert not p.folded and set(p.rects) == set(PANES) and _area(p) == 250 * 90
    for key, rect in p.rects.items():
        assert rect.h >= WANTS[key] + CHROME or key in ("gpus", "history"), key  # beside a taller neighbour
    assert p.rects["gpus"].y == p.rects["topo"].y == 0 and p.rects["gpus"].w == 87  # side by side


def test_folds_least_useful_first_and_keeps_the_gpus() -> None:
    last: tuple[str, ...] = ()
    for height in range(80, 10, -1):
        p = plan(120, height, need, panes=PANES, widths=WIDTHS)
        assert "gpus" in p.rects and p.rects["gpus"].h >= 4 + CHROME
        assert p.folded == FOLD_ORDER[: len(p.folded)], (height, p.folded)
        assert len(p.folded) >= len(last)  # less room never shows more
        last = p.folded
        if height >= 22:
            assert _area(p) == 120 * height, height
    assert last == FOLD_ORDER


def test_the_slot_shows_the_picked_folded_pane() -> None:
    p = plan(80, 22, need, panes=PANES, widths=WIDTHS)
    assert p.slot_pane == "procs" and p.tabs == Rect(0, p.rects["procs"].y - 1, 80, 1)
    p = plan(80, 22, need, panes=PANES, widths=WIDTHS, pick="numa")
    assert p.slot_pane == "numa" and "procs" not in p.rects


def test_zoom_takes_the_body() -> None:
    assert plan(120, 38, need, panes=PANES, widths=WIDTHS, zoom="procs").rects == {"procs": Rect(0, 0, 120, 38)}


def test_narrow_matrix_stacks_under_the_gpus() -> None:
    p = plan(90, 80, need, panes=PANES, widths=WIDTHS)
    assert p.rects["topo"].x == 0 and p.rects["topo"].y >= p.rects["gpus"].h


def test_no_empty_lines_beside_a_taller_column_while_a_pane_is_cut() -> None:
    # The TP groups / NUMA column wants more than the history beside it: growing their band to show all of it would
    # leave the history with empty lines while the process list still hides rows (200x50 demo, issue 37).
    wants = {**WANTS, "groups": 7, "numa": 5, "procs": 15, "logs": 9}

    def need2(key: str, width: int) -> Need:
        return Need(wants[key], wants[key] if key == "topo" else min(wants[key], 4))

    p = plan(200, 48, need2, panes=PANES, widths=WIDTHS)
    assert not p.folded
    assert p.rects["history"].h == wants["history"] + CHROME  # all of it, not one line more
    assert p.rects["procs"].h > 4 + CHROME + 2  # the room went to the process list, which still has rows hidden


def test_what_is_left_goes_to_a_followed_log_else_to_processes() -> None:
    small = {**WANTS, "procs": 4, "logs": 2, "history": 8, "groups": 2, "numa": 1, "workers": 2, "gpus": 2, "topo": 2}

    def need_with(grows: bool):  # type: ignore[no-untyped-def]
        def need3(key: str, width: int) -> Need:
            return Need(small[key], small[key] if key == "topo" else min(small[key], 4), grows and key == "logs")

        return need3

    p = plan(200, 48, need_with(True), panes=PANES, widths=WIDTHS)
    assert p.rects["procs"].h == 4 + CHROME and p.rects["history"].h == 8 + CHROME and p.rects["logs"].h > 20
    # One GPU and no worker (nothing to tail): the processes take it, the log pane keeps its one line, the history
    # its charts' height (a taller chart redraws a taller column every tick).
    p = plan(200, 48, need_with(False), panes=PANES, widths=WIDTHS)
    assert p.rects["logs"].h == 2 + CHROME
    assert p.rects["history"].h == 8 + CHROME and p.rects["procs"].h > 4 + CHROME + 10
    assert _area(p) == 200 * 48
