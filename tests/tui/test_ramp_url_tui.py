"""Issue 23 item 10 in the TUI: ``:ramp`` against a worker whose URL is malformed (a forged or damaged record) says so
in one notification instead of opening a ramp that dies in its first connection."""

from __future__ import annotations

from amdtop.model import WorkerState, WorkerStatus
from amdtop.telemetry.sim import SimBackend
from tests.tui.conftest import FROZEN, NO_PROC, open_app, settle
from tui.screens.ramp import RampScreen


class Source:
    def status(self) -> list[WorkerStatus]:
        return [WorkerStatus("w1", WorkerState.READY, (0, 1), port=99999, url="http://127.0.0.1:99999")]

    def close(self) -> None:
        pass


async def test_ramp_refuses_a_worker_with_a_bad_url() -> None:
    sim = SimBackend(seed=1, clock=lambda: FROZEN)
    app = open_app(sim, workers=Source(), autopoll=False, clock=lambda: FROZEN, proc_root=NO_PROC, discover=False)
    async with app.run_test(size=(200, 50)) as pilot:
        app.step(1)
        await settle(pilot)
        app.action_ramp("w1")
        await settle(pilot)
        assert not isinstance(app.screen, RampScreen)
        message = [n.message for n in app._notifications][-1]
        assert message.startswith("w1: cannot ramp: 'http://127.0.0.1:99999': port '99999'"), message
