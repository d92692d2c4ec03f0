"""The launch gate refuses the same launch wherever it is asked for: ``amdtop workers launch``, the in-process
dashboard, a viewer attached to ``amdtop serve`` and a browser tab of ``amdtop web --allow-control`` (its viewer's own
command line, attached the way the tab's viewer attaches). The refusal is real: a process listens on the worker's
port (the gate's leftover rule); no gate is faked."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from amdtop import runtime
from amdtop.cli.common import node_spec
from amdtop.cli.main import build_parser
from amdtop.runtime import NodeSpec
from amdtop.serve.client import ServeClient
from amdtop.serve.server import Serve
from tests.fixtures.demo_node import port_holder, port_of, write_demo_profiles
from tui.app import AmdtopApp
from tui.attached import attached_app
from tui.screens.confirm import ConfirmScreen
from tui.web import viewer_argv

WORKER = "qwen-32b"
REASON = f"1 leftover vLLM process(es) hold {WORKER}'s GPUs or port"


@dataclass
class Held:
    state: Path
    config: Path
    pid: int


@pytest.fixture
def held(tmp_path: Path) -> Iterator[Held]:
    state = tmp_path / "state"
    profiles = write_demo_profiles(state)
    with port_holder(port_of(profiles, WORKER)) as pid:
        yield Held(state, tmp_path / "none.toml", pid)


def _argv(held: Held) -> list[str]:
    return ["--demo", "--state-dir", str(held.state), "--config", str(held.config), "--interval", "0.2"]


async def _until(cond: Callable[[], bool], timeout: float = 30.0) -> None:
    for _ in range(int(timeout / 0.05)):
        if cond():
            return
        await asyncio.sleep(0.05)
    raise AssertionError("condition not met in time")


async def _launch_is_refused(app: AmdtopApp) -> None:
    """Press for a launch of the worker; the gate's dialog names the reason and offers --force; nothing started."""
    async with app.run_test(size=(200, 50)):
        await _until(lambda: app.dashboard.last_frame is not None)
        app.action_launch(WORKER)
        await _until(lambda: isinstance(app.screen, ConfirmScreen))
        assert isinstance(app.screen, ConfirmScreen)
        text = app.screen.text
        assert f"Launch {WORKER} refused by the launch gate" in text and REASON in text and "--force" in text
        status = await asyncio.to_thread(app.service.status)
        assert [w.pid for w in status if w.name == WORKER] == [None]


def test_workers_launch_refuses(held: Held) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "amdtop", *_argv(held), "workers", "launch", WORKER],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 1, done.stderr
    assert f"worker[{WORKER}]: launch refused (1 reason(s); --force overrides):" in done.stderr
    assert REASON in done.stderr


async def test_in_process_dashboard_refuses(held: Held) -> None:
    spec = node_spec(build_parser().parse_args(_argv(held)))
    node = runtime.open(spec, ui=True)
    app = AmdtopApp(node, state_dir=spec.state_dir)
    node.runtime.start()  # as `amdtop` starts it: the dashboard draws the newest frame when it mounts
    try:
        await _launch_is_refused(app)
    finally:
        node.shutdown()


@pytest.fixture
def serve(held: Held) -> Iterator[Serve]:
    spec = NodeSpec(config=held.config, state_dir=held.state, demo=True, interval=0.2)
    node = runtime.open(spec, ui=True)
    srv = Serve(node, held.state).start()
    node.runtime.start()
    try:
        yield srv
    finally:
        srv.close()
        node.shutdown()


async def test_attached_viewer_refuses(held: Held, serve: Serve) -> None:
    client = ServeClient(held.state)
    try:
        await _launch_is_refused(attached_app(client, held.state, readonly=False, watch_tty=False))
    finally:
        client.close()


async def test_web_allow_control_viewer_refuses(held: Held, serve: Serve) -> None:
    web_args = build_parser().parse_args([*_argv(held), "web", "--allow-control"])
    argv = viewer_argv(web_args, held.state)
    assert argv[1:3] == ["-m", "tui"] and "--readonly" not in argv
    # The tab's viewer: `python -m tui --attach-only ...` attaches (tui.launch.run) and runs the attached app.
    args = build_parser().parse_args(argv[3:])
    assert args.attach_only and not args.readonly
    client = ServeClient(node_spec(args).state_dir, readonly=bool(args.readonly))
    try:
        app = attached_app(client, node_spec(args).state_dir, readonly=bool(args.readonly), watch_tty=False)
        await _launch_is_refused(app)
    finally:
        client.close()
