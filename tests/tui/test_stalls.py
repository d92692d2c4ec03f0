"""A stalled worker on the dashboard (row, TP groups pane, GPU tag) and key ``d``: each rank's stacks with py-spy."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest

from amdtop.health.stall import instant_health
from amdtop.model import FlagKind, RankSample, WorkerStatus
from amdtop.pipeline import WorkerSource
from amdtop.supervisor import stacks
from amdtop.supervisor.procs import read_stat
from tests.tui.conftest import make_app, settle
from tui.screens.stacks import StacksScreen
from widgets.workers_table import WorkersTable

SCRIPT = "import time\ndef waiting_in_collective():\n    time.sleep(300)\nwaiting_in_collective()\n"
# Built samples (no process behind them): the picture needs fixed pids. Rank 2 of the demo's TP-4 llama-70b is stopped.
STOPPED_RANKS = tuple(RankSample(r, 43210 + r, "T" if r == 2 else "S", 1.0, 12, 0.0) for r in range(4))


class WithRanks:
    """The demo's worker source, with ``name``'s rank processes as given (what the supervisor reads from /proc)."""

    def __init__(self, inner: WorkerSource, name: str, ranks: tuple[RankSample, ...]) -> None:
        self.inner, self.name, self.ranks = inner, name, ranks

    def status(self) -> list[WorkerStatus]:
        pids = tuple((r.rank, r.pid) for r in self.ranks)
        return [
            replace(w, ranks=self.ranks, rank_pids=pids, health=instant_health(self.ranks, w.name))
            if w.name == self.name
            else w
            for w in self.inner.status()
        ]


def stalled_app() -> Any:
    app = make_app()
    app.pipeline.workers = WithRanks(app.pipeline.workers, "llama-70b", STOPPED_RANKS)
    app.pipeline.stalls.raise_after_s = 0.0  # the picture shows the raised flag without waiting out the hysteresis
    return app


def row_text(app: Any, name: str) -> str:
    table = app.dashboard.query_one("#pane-workers", WorkersTable)
    return " ".join(str(c) for c in table.get_row(f"w-{name}"))


async def test_stalled_worker_row_names_the_rank() -> None:
    app = stalled_app()
    async with app.run_test(size=(200, 50)) as pilot:
        await pilot.pause()
        frame = app.step(2)
        await settle(pilot)
        (flag,) = frame.flags_of(FlagKind.WORKER_STALLED)
        assert (flag.worker, dict(flag.extra)["rank"], flag.gpus) == ("llama-70b", 2, (2,))
        assert "stalled r2" in row_text(app, "llama-70b")
        assert "stalled" not in row_text(app, "qwen-32b")


def test_snapshot_stalled_worker(snap_compare: Any) -> None:
    async def run_before(pilot: Any) -> None:
        await pilot.pause()
        pilot.app.step(3)
        await pilot.pause()

    assert snap_compare(stalled_app(), terminal_size=(200, 50), run_before=run_before)


@pytest.fixture
def python_rank() -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen([sys.executable, "-c", SCRIPT])
    deadline = time.monotonic() + 10
    while (st := read_stat(proc.pid)) is not None and st.state != "S" and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(0.2)
    try:
        yield proc
    finally:
        os.kill(proc.pid, signal.SIGCONT)
        proc.kill()
        proc.wait()


async def _open_stacks(app: Any, pilot: Any) -> StacksScreen:
    await pilot.pause()
    app.step(2)
    await settle(pilot)
    await pilot.press("5", "d")
    await settle(pilot)
    screen = app.screen
    assert isinstance(screen, StacksScreen)
    deadline = time.monotonic() + 30
    while screen.result is None and time.monotonic() < deadline:
        await pilot.pause(0.1)
    return screen


@pytest.mark.skipif(stacks.find_py_spy() is None, reason="py-spy is not installed (pip install -e '.[dev]')")
async def test_d_dumps_the_selected_workers_ranks(python_rank: subprocess.Popen[bytes]) -> None:
    app = make_app()
    first = app.pipeline.workers.status()[0].name
    rank = (RankSample(0, python_rank.pid, "S"),)
    app.pipeline.workers = WithRanks(app.pipeline.workers, first, rank)
    async with app.run_test(size=(200, 50)) as pilot:
        screen = await _open_stacks(app, pilot)
        assert screen.result is not None and screen.result.error is None, screen.result.error
        # One rank, dumped by the node service (the serve's when attached): its header names the pid.
        assert screen.result.text.count("=== ") == 1 and f"pid {python_rank.pid}" in screen.result.text
        assert "waiting_in_collective" in screen.result.text
        await pilot.press("escape")
        await settle(pilot)
        assert not isinstance(app.screen, StacksScreen)
    assert python_rank.poll() is None  # dumped, not touched


async def test_d_without_py_spy_says_so_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stacks, "find_py_spy", lambda: None)
    app = make_app()
    first = app.pipeline.workers.status()[0].name
    app.pipeline.workers = WithRanks(app.pipeline.workers, first, (RankSample(0, os.getpid(), "S"),))
    async with app.run_test(size=(200, 50)) as pilot:
        screen = await _open_stacks(app, pilot)
        assert screen.result is not None and screen.result.error is not None
        assert screen.result.error.startswith("workers stacks: py-spy is not installed; install it with pip install")
        assert any("py-spy is not installed" in str(n.message) for n in app._notifications)


def test_crashed_row_names_the_error_line() -> None:
    from amdtop.model import WorkerState
    from amdtop.pipeline import NodeFrame
    from amdtop.telemetry.sim import SimBackend
    from tui.viewmodel.workers import with_errors, worker_rows

    line = "rank 1 died (killed by SIGKILL); the worker crashed: Worker proc VllmWorker-1 died unexpectedly"
    crashed = WorkerStatus("tp2", WorkerState.CRASHED, (), error_line=line)
    rows = worker_rows(NodeFrame(SimBackend().sample(), workers=(crashed,)), 0.0)
    width = len(WorkersTable.COLUMNS)
    assert str(with_errors(rows, {}, width)["w-tp2"][-1]) == f"✗ {line}"
    # A failed control action on the row still wins over it.
    assert str(with_errors(rows, {"tp2": "launch tp2: refused"}, width)["w-tp2"][-1]) == "✗ launch tp2: refused"
