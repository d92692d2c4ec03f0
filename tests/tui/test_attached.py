"""The dashboard attached to an in-process serve (Pilot): the header, the serve's frames and history, control through
the serve's supervisor, read-only viewers, and the viewer leaving when the serve stops."""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from textual.widgets import Static

from amdtop import runtime
from amdtop.cli.common import node_spec
from amdtop.cli.main import build_parser
from amdtop.serve.client import RemoteService, ServeClient
from amdtop.serve.server import Serve
from tui.attached import attached_app


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Serve]:
    args = build_parser().parse_args(
        ["--demo", "--state-dir", str(tmp_path / "state"), "--config", str(tmp_path / "none.toml"), "--interval", "0.2"]
    )
    node = runtime.open(node_spec(args), ui=True)
    srv = Serve(node, tmp_path / "state").start()
    node.runtime.start()
    try:
        yield srv
    finally:
        srv.close()
        node.shutdown()


async def _until(cond, timeout: float = 20.0) -> None:  # type: ignore[no-untyped-def]
    for _ in range(int(timeout / 0.05)):
        if cond():
            return
        await asyncio.sleep(0.05)
    raise AssertionError("condition not met in time")


READERS = pytest.mark.parametrize("reader", [False, True], ids=["loop-reads", "reader-thread"])
"""``amdtop`` attaches without a reader thread (the app's loop reads the socket); tests and scripts use the thread."""


@READERS
async def test_attached_header_frames_and_control_through_the_serve(serve: Serve, reader: bool) -> None:
    client = ServeClient(serve.state_dir, reader=reader)
    if not reader:
        assert client.wait_first_frame(10) is not None  # read inline: nothing else reads yet
    app = attached_app(client, serve.state_dir, readonly=False, watch_tty=False)
    async with app.run_test(size=(200, 50)):
        readers = [t.name for t in threading.enumerate() if t.name == "amdtop-attach"]
        assert readers == (["amdtop-attach"] if reader else [])
        # Counted frames may still be on their way to the screen: wait for the drawn one (under load it lags).
        await _until(lambda: app.frames >= 2 and app.dashboard.last_frame is not None)
        banner = str(app.dashboard.query_one("#banner", Static).render())
        assert f"attached to amdtop serve (pid {os.getpid()})" in banner
        frame = app.dashboard.last_frame
        assert frame is not None and frame.history and len(frame.history[0].util_pct) >= 2
        assert isinstance(app.service, RemoteService)  # the viewer polls nothing: the serve does
        assert app.check_action("launch", ()) is not False
        # A control request runs in the serve's supervisor (its owner thread) and answers here.
        diff = await asyncio.to_thread(app.service.retune_diff, "llama-70b", {"max-num-seqs": "64"})
        assert "max-num-seqs" in diff
        # On the UI thread itself (the retune dialog reads the profile's words there): with the loop reading the
        # socket, the wait reads it inline, frames that come first included.
        seen = app.received
        words = app.service.profile_words("llama-70b")
        assert any(w.startswith("max-num-seqs=") for w in words)
        drawn = app.frames
        await _until(lambda: app.received > seen + 1 and app.frames > drawn)  # the loop reads on after it
        assert app.dashboard.last_frame is not None
    client.close()


async def test_read_only_viewer_has_no_control(serve: Serve) -> None:
    client = ServeClient(serve.state_dir, readonly=True)
    app = attached_app(client, serve.state_dir, readonly=True, watch_tty=False)
    async with app.run_test(size=(200, 50)):
        await _until(lambda: app.frames >= 1)
        assert app.readonly and app.service.readonly
        for action in ("launch", "stop", "restart", "retune", "ramp"):
            assert app.check_action(action, ()) is False
    client.close()


@READERS
async def test_viewer_exits_when_the_serve_stops(serve: Serve, reader: bool) -> None:
    client = ServeClient(serve.state_dir, reader=reader)
    app = attached_app(client, serve.state_dir, readonly=False, watch_tty=False)
    async with app.run_test(size=(200, 50)):
        await _until(lambda: app.frames >= 1)
        serve.close()
        await _until(lambda: not app.is_running)
    assert app.serve_gone == [f"amdtop serve (pid {os.getpid()}): serve stopped"]
    assert app.return_value == 1
    client.close()
