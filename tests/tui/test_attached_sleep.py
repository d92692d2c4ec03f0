"""`z` in a viewer attached to amdtop serve: the worker sleeps and wakes through the serve's supervisor (a real
simulated vLLM server in dev mode), as in the in-process dashboard."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from amdtop import runtime
from amdtop.model import WorkerState
from amdtop.runtime import NodeSpec
from amdtop.serve.client import ServeClient
from amdtop.serve.server import Serve
from tests.fixtures.demo_node import write_demo_profiles
from tui.attached import attached_app
from tui.screens.confirm import ConfirmScreen

W = "mistral-7b"


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Serve]:
    state = tmp_path / "state"
    write_demo_profiles(state, {W: ("", 'VLLM_SERVER_DEV_MODE = "1"\n')})
    node = runtime.open(NodeSpec(config=tmp_path / "none.toml", state_dir=state, demo=True, interval=0.2), ui=True)
    srv = Serve(node, state).start()
    node.runtime.start()
    try:
        yield srv
    finally:
        srv.close()
        if node._node.control is not None:
            node._node.control.stop(W, grace=2)
        node.shutdown()


async def _until(cond: Callable[[], bool], timeout: float = 30.0) -> None:
    for _ in range(int(timeout / 0.05)):
        if cond():
            return
        await asyncio.sleep(0.05)
    raise AssertionError("condition not met in time")


def _state(serve: Serve) -> WorkerState | None:
    frame = serve.runtime.frame
    worker = frame.worker(W) if frame is not None else None
    return worker.state if worker is not None else None


async def test_z_sleeps_and_wakes_a_worker_when_attached(serve: Serve) -> None:
    client = ServeClient(serve.state_dir)
    try:
        app = attached_app(client, serve.state_dir, readonly=False, watch_tty=False)
        async with app.run_test(size=(200, 50)) as pilot:
            await asyncio.to_thread(app.service.launch, W)
            await _until(lambda: _state(serve) is WorkerState.READY)
            await _until(
                lambda: app.dashboard.last_frame is not None and app.dashboard.last_frame.worker(W) is not None
            )
            app.action_sleep(W)
            await _until(lambda: isinstance(app.screen, ConfirmScreen))
            await pilot.press("y")
            await _until(lambda: _state(serve) is WorkerState.ASLEEP)
            await _until(lambda: app.dashboard.last_frame.worker(W).state is WorkerState.ASLEEP)  # type: ignore[union-attr]
            app.action_sleep(W)  # asleep: `z` wakes it at once
            await _until(lambda: _state(serve) is WorkerState.READY)
    finally:
        client.close()
