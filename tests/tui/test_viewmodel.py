"""The dashboard's view model read directly, without an app: :meth:`DashboardView.of` over the demo node (8x MI300X,
three workers), the real H200 capture (tests/fixtures/nvml/h200_replay.json) and a DP x TP worker (DP2xTP4+EP).

The nodes are opened as the Pilot tests open theirs (tests.tui.conftest); the view is then built from their frames by
hand, so each pane's slice is checked as data, not as pixels.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import pytest

from amdtop.pipeline import NodeFrame
from amdtop.telemetry.base import BackendOptions
from amdtop.telemetry.nvml_replay import ReplayNvml, load_fixture, materialize
from tests.tui.conftest import FROZEN, imbalanced_specs, make_app, open_app
from tests.tui.nodes import SteppedNvml
from tui.viewmodel.dashboard import WORKER_CELLS, DashboardView, UiState
from tui.viewmodel.processes import NO_PROCESSES, no_logs_text
from widgets.workers_table import WorkersTable

H200_REPLAY = Path(__file__).resolve().parents[1] / "fixtures" / "nvml" / "h200_replay.json"
UI = UiState(now=FROZEN)


def _cells(row: tuple[object, ...]) -> list[str]:
    return [str(c) for c in row]


@pytest.fixture(scope="module")
def demo() -> list[NodeFrame]:
    """Two consecutive frames of the demo node with an imbalanced TP group (flags on its GPUs)."""
    app = make_app(specs=imbalanced_specs())
    first = app.step(6)
    return [first, app.step()]


@pytest.fixture(scope="module")
def h200() -> NodeFrame:
    fixture = load_fixture(H200_REPLAY)
    root = Path(tempfile.mkdtemp(prefix="amdtop-vm-h200-"))
    sysfs, proc = materialize(fixture, root)
    backend = SteppedNvml(ReplayNvml(fixture), BackendOptions(sysfs_root=sysfs, proc_root=proc))
    backend._hostname = "h200-capture"
    app = open_app(backend, clock=lambda: FROZEN, proc_root=proc, state_dir=root, autopoll=False, discover=False)
    return app.step(6)


@pytest.fixture(scope="module")
def dp() -> NodeFrame:
    return make_app(demo_layout="dp").step(6)


def test_the_worker_row_has_the_panes_cells() -> None:
    assert len(WorkersTable.COLUMNS) == WORKER_CELLS


def test_demo_every_pane_from_one_frame(demo: list[NodeFrame]) -> None:
    frame = demo[0]
    view = DashboardView.of(frame, UI)
    assert list(view.gpus) == [f"gpu-{g.index}" for g in frame.snapshot.topology.gpus]
    assert list(view.workers) == [f"w-{w.name}" for w in frame.workers]
    assert all(len(row) == WORKER_CELLS for row in view.workers.values())
    # Each GPU an imbalance flag names is tagged on its row (the flags column), and no other.
    flagged = {g for f in frame.flags if f.kind.value == "tp_imbalance" for g in f.gpus}
    assert flagged
    tagged = {int(k.removeprefix("gpu-")) for k, row in view.gpus.items() if "IMB" in str(row[6])}
    assert tagged == flagged
    assert any("IMBALANCED" in line.plain for line in view.groups)
    assert [name for name, _, _ in view.topo.groups] == [g.worker for g in frame.groups if len(g.gpus) > 1]
    assert view.status.startswith("[b]amdtop[/b] amdtop-demo · backend sim · 8 GPUs")
    assert f"{len(frame.workers)} workers" in view.status and "flags[/red]" in view.status
    assert view.clock == time.strftime("%H:%M:%SZ", time.gmtime(FROZEN))
    assert view.worker_names == tuple(w.name for w in frame.workers)
    assert len(view.history.history) == 8 and view.history.interval == UI.interval
    assert any(line.plain.startswith("node 0") for line in view.numa)


def test_demo_filter_reaches_gpus_workers_and_processes(demo: list[NodeFrame]) -> None:
    frame = demo[0]
    view = DashboardView.of(frame, replace(UI, filter_term="gpu3"))
    assert list(view.gpus) == ["gpu-3"]
    using = [f"w-{w.name}" for w in frame.workers if 3 in w.gpus]
    assert using and list(view.workers) == using
    assert all(key.startswith(("p-3-", "t-3")) for key in view.processes)
    assert view.filter_note == "/gpu3" and view.procs_note.startswith(" · /gpu3")
    assert DashboardView.of(frame, replace(UI, filter_term="no-such-thing")).gpus == {}


def test_demo_a_failed_action_shows_on_its_row(demo: list[NodeFrame]) -> None:
    frame = demo[0]
    name = frame.workers[0].name
    view = DashboardView.of(frame, replace(UI, worker_errors={name: f"launch {name}: refused"}))
    assert str(view.workers[f"w-{name}"][-1]) == f"✗ launch {name}: refused"
    others = [row for key, row in view.workers.items() if key != f"w-{name}"]
    assert all("✗" not in str(row[-1]) for row in others)


def test_redraw_of_a_frame_lends_its_slices_and_a_new_frame_does_not(demo: list[NodeFrame]) -> None:
    first, second = demo
    view = DashboardView.of(first, UI)
    again = DashboardView.of(first, replace(UI, filter_term="gpu1"), view)
    # The history sweep and the log tail take a frame's news once: a redraw hands them the same slice (not drawn).
    assert again.history is view.history and again.logs is view.logs
    assert again.processes is not view.processes  # filtered: rebuilt
    same = DashboardView.of(first, UI, view)
    assert same.processes is view.processes  # same rows, sort and filter: the rows as they were
    nxt = DashboardView.of(second, UI, view)
    assert nxt.history is not view.history and nxt.history.history is second.history
    # The link view does not change from tick to tick: the matrix is not redrawn.
    assert nxt.topo == view.topo
    traffic = DashboardView.of(second, replace(UI, show_traffic=True))
    assert traffic.topo.show_traffic and traffic.topo.snapshot is second.snapshot


def test_h200_capture(h200: NodeFrame) -> None:
    view = DashboardView.of(h200, UI)
    assert "h200-capture · backend nvml · 1 GPUs · 0 workers" in view.status
    (row,) = view.gpus.values()
    cells = _cells(row)
    sample = h200.snapshot.gpus[0]
    assert sample.util_pct is not None and cells[1].strip() == f"{sample.util_pct:.1f}%"
    assert cells[3].strip() == f"{sample.power_w:.0f}W"
    assert view.workers == {} and view.logs.empty_note == no_logs_text(0)
    assert view.history.power_caps == (h200.snapshot.topology.gpus[0].power_cap_w,)
    # Each process on the GPU, then the GPU's total row.
    keys = list(view.processes)
    assert keys[-1] == "t-0" and set(keys[:-1]) == {r.key for r in h200.processes}
    assert _cells(view.processes["t-0"])[3] == f"{len(h200.processes)} proc"
    assert [line.plain for line in view.groups] == ["No TP groups: no worker is running."]
    empty = DashboardView.of(replace(h200, processes=(), process_totals=()), UI)
    assert empty.processes == {} and NO_PROCESSES  # the pane says NO_PROCESSES itself


def test_dp_by_tp_worker(dp: NodeFrame) -> None:
    (worker,) = dp.workers
    folded = DashboardView.of(dp, UI)
    assert list(folded.workers) == [f"w-{worker.name}"]
    name, _, gpus = _cells(folded.workers[f"w-{worker.name}"])[:3]
    assert name == f"▸ {worker.name}" and gpus.endswith(" DP2xTP4+EP")
    view = DashboardView.of(dp, replace(UI, expanded=frozenset({worker.name})))
    engines = {k: _cells(r) for k, r in view.workers.items() if k.startswith("e-")}
    assert {k: (r[2], r[10]) for k, r in engines.items()} == {
        f"e-{worker.name}/0": ("0,1,2,3", "dp0"),
        f"e-{worker.name}/1": ("4,5,6,7", "dp1"),
    }
    # One TP group per DP rank, in the groups pane and on the matrix.
    heads = [line.plain for line in view.groups if not line.plain.startswith(" ")]
    assert [h.split()[0] for h in heads] == [f"{worker.name}/dp0", f"{worker.name}/dp1"]
    assert all(" TP4 " in h for h in heads)
    assert view.topo.groups == ((worker.name, (0, 1, 2, 3), False), (worker.name, (4, 5, 6, 7), False))


def test_the_view_model_loads_no_textual() -> None:
    code = "import sys, tui.viewmodel.dashboard; print(sorted(m for m in sys.modules if m.split('.')[0] in ('textual', 'widgets')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


async def test_a_redraw_of_the_drawn_frame_feeds_the_sweep_and_the_tail_nothing_twice() -> None:
    # `m` (and a failed poll) draws the frame on screen again: the history sweep took its point and the tail its new
    # lines when it was first drawn (before the view model, each redraw pushed the point and wrote the lines again).
    from textual.widgets import Log

    from amdtop.logread.rccl.lines import LogLine
    from amdtop.logread.rccl.monitor import LogUpdate
    from tests.tui.conftest import settle
    from widgets.gpu_history import GpuHistory

    app = make_app()
    async with app.run_test(size=(200, 50)) as pilot:
        await pilot.pause()
        app.step(3)
        await settle(pilot)
        line = LogLine("llama-70b", "/x.log", "=== amdtop launch llama-70b")
        app._show(replace(app.step(), logs=LogUpdate((line,), 0, (), (), ())))
        await settle(pilot)
        history = app.dashboard.query_one("#pane-history", GpuHistory)
        log = app.dashboard.query_one("#pane-logs Log", Log)
        pushes, lines = history._pushes, list(log.lines)
        assert lines.count("=== amdtop launch llama-70b") == 1
        await pilot.press("m")
        await settle(pilot)
        assert app.dashboard.show_traffic  # the redraw happened (no probe results: straight to traffic)
        assert history._pushes == pushes and list(log.lines) == lines
