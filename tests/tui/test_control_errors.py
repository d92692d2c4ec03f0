"""A failed launch, restart or retune never fails silently: its one line sits on the worker's row and pops up."""

from __future__ import annotations

from typing import Any

from amdtop.errors import InputError
from tests.tui.conftest import make_app, settle
from tests.tui.demo_control import DemoControl
from tui.launch import DemoAutostart
from tui.screens.dashboard import Header
from widgets.workers_table import WorkersTable

NUMACTL = 'worker[llama-70b].numa_node: numactl is not installed but pinning to node 0 is asked; install numactl or set numa_node = "none"'


def row_text(app: Any, name: str) -> str:
    table = app.dashboard.query_one("#pane-workers", WorkersTable)
    return " ".join(str(c) for c in table.get_row(f"w-{name}"))


async def _ready(pilot: Any) -> None:
    await pilot.pause()
    pilot.app.step(2)
    await settle(pilot)


async def test_failed_launch_shows_on_the_row_and_as_a_notification() -> None:
    app = make_app()
    control: DemoControl = app.control

    def refuse(name: str, force: bool = False) -> Any:
        raise InputError(NUMACTL + "\nusage: numactl [--all | -a] ...")  # a tool's usage text never reaches the row

    control.launch = refuse  # type: ignore[method-assign]
    async with app.run_test(size=(200, 50)) as pilot:
        await _ready(pilot)
        await pilot.press("5", "l")
        await settle(pilot)
        assert f"✗ launch llama-70b: {NUMACTL}" in row_text(app, "llama-70b")
        assert "usage" not in row_text(app, "llama-70b")
        assert [n.message for n in app._notifications] == [f"launch llama-70b: {NUMACTL}"]
        assert "✗" not in row_text(app, "qwen-32b")
        # The next action on that worker that succeeds clears the row.
        await pilot.press("r", "y")
        await settle(pilot)
        assert "✗" not in row_text(app, "llama-70b")


async def test_failed_retune_shows_on_the_row() -> None:
    app = make_app()
    async with app.run_test(size=(200, 50)) as pilot:
        await _ready(pilot)
        app.control.retune_diff = lambda name, changes: (_ for _ in ()).throw(  # type: ignore[method-assign]
            InputError("retune: max-num-seqs: 0 is not a positive integer")
        )
        app.controller.retune_diff("llama-70b", {"max-num-seqs": "0"})
        await settle(pilot)
        assert "✗ retune llama-70b: retune: max-num-seqs" in row_text(app, "llama-70b")


async def test_demo_autostart_failure_reaches_the_row() -> None:
    # The autostart thread may fail before the app's loop runs: the failure waits in the inbox for the next frame.
    app = make_app()

    class Broken(DemoControl):
        def launch(self, name: str) -> Any:
            if name == "qwen-32b":
                raise InputError(f"worker[{name}].port: port 18201 is already in use on this host")
            return super().launch(name)

    broken = Broken(app.backend, clock=lambda: 0.0)
    auto = DemoAutostart(broken, on_failure=app.failures.put).start()
    auto.thread.join(timeout=10)
    assert auto.failed == {"qwen-32b": "launch qwen-32b: worker[qwen-32b].port: port 18201 is already in use on this host"}
    async with app.run_test(size=(200, 50)) as pilot:
        await _ready(pilot)
        assert "✗ launch qwen-32b: worker[qwen-32b].port" in row_text(app, "qwen-32b")
        assert any("already in use" in n.message for n in app._notifications)


async def test_frames_before_the_panes_composed_are_kept_not_fatal() -> None:
    # The tmux flake: under CPU load the poller's first frame, carrying the demo workers' launch lines, beat the log
    # pane's compose and amdtop died at start (NoMatches: no Log in LogTailPane).
    from dataclasses import replace

    from amdtop.logread.rccl.lines import LogLine
    from amdtop.logread.rccl.monitor import LogUpdate

    app = make_app()
    line = LogLine("llama-70b", "/x.log", "=== amdtop launch llama-70b")
    frame = replace(app.pipeline.tick(), logs=LogUpdate((line,), 0, (), (), ()))
    app.dashboard.apply(frame, Header(0.0, poll_error="early frame"))  # nothing is mounted yet
    async with app.run_test(size=(200, 50)) as pilot:
        await settle(pilot)
        assert app.dashboard.last_frame is frame
        assert "early frame" in str(app.dashboard.query_one("#status").render())
        assert "=== amdtop launch llama-70b" in "\n".join(app.dashboard.query_one("#pane-logs Log").lines)
