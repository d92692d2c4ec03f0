"""A server amdtop did not start, in the dashboard attached to a serve (Pilot): its engine numbers on its Workers row
and the adopt key (``A``), confirmed, writing its profile through the serve's supervisor.

The server is the SGLang stand-in started by hand (tests/fakes/sglang: SGLang's argv and process titles, ``/metrics``
the captured page of tests/fixtures/sglang_metrics/sglang-docs-overloaded.txt), its stdout a file.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from amdtop import runtime
from amdtop.analysis import discover_vllm
from amdtop.cli.common import node_spec
from amdtop.cli.main import build_parser
from amdtop.serve.client import ServeClient
from amdtop.serve.server import Serve
from tests.unit.test_found_servers import FAKES, PAGE, free_port
from tui.attached import attached_app
from tui.screens.confirm import ConfirmScreen


@pytest.fixture
def found(tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    port = free_port()
    env = {**os.environ, "PYTHONPATH": f"{FAKES}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    argv = [sys.executable, "-m", "sglang.launch_server", "--model-path", "meta-llama/Llama-3.1-8B-Instruct",
            "--port", str(port), "--tp-size", "2", "--enable-metrics", "--metrics-page", str(PAGE)]  # fmt: skip
    with open(tmp_path / "serve.log", "wb") as out:
        proc = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        # every process up before the serve opens: discovery's full walk comes at its first tick, then every 30 s
        deadline = time.monotonic() + 20
        while not any(w.pid == proc.pid and len(w.rank_pids) == 2 for w in discover_vllm()):
            assert time.monotonic() < deadline, "the stand-in's schedulers never came up"
            time.sleep(0.1)
        yield proc
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)  # its schedulers, whatever the test left
        proc.wait(10)


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Serve]:
    # No GPU telemetry (the simulated node discovers nothing real), an empty profile file: the servers found are real.
    config = tmp_path / "workers.toml"
    config.write_text("")
    args = build_parser().parse_args(
        ["--backend", "none", "--state-dir", str(tmp_path / "state"), "--config", str(config), "--interval", "0.2"]
    )
    service = runtime.open(node_spec(args), ui=True)
    srv = Serve(service, tmp_path / "state").start()
    service.runtime.start()
    try:
        yield srv
    finally:
        srv.close()
        service.shutdown()


async def _until(cond, timeout: float = 30.0) -> None:  # type: ignore[no-untyped-def]
    for _ in range(int(timeout / 0.05)):
        if cond():
            return
        await asyncio.sleep(0.05)
    raise AssertionError("condition not met in time")


async def test_found_server_row_and_adopt_key_through_the_serve(
    found: subprocess.Popen[bytes], serve: Serve, tmp_path: Path
) -> None:
    name = f"sglang-{found.pid}"
    client = ServeClient(serve.state_dir, reader=True)
    app = attached_app(client, serve.state_dir, readonly=False, watch_tty=False)
    async with app.run_test(size=(200, 50)) as pilot:

        def shown() -> bool:
            frame = app.dashboard.last_frame
            w = None if frame is None else frame.worker(name)
            return w is not None and w.engine is not None and len(w.rank_pids) == 2

        # discovery's full walk comes at the serve's first tick; the look every 2 s after
        await _until(shown)
        w = app.dashboard.last_frame.worker(name)  # type: ignore[union-attr]
        assert w is not None and w.source == "discovered" and w.log == str(tmp_path / "serve.log")
        assert w.engine is not None and w.engine.running == 162  # the captured page's, over the wire
        await pilot.press("5", "home")
        for _ in range(20):  # down to its row (other servers found on a shared host may sort around it)
            await pilot.pause()
            if app.dashboard.selected_worker() == name:
                break
            await pilot.press("down")
        assert app.dashboard.selected_worker() == name
        await pilot.press("A")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmScreen) and name in app.screen.text
        await pilot.press("y")
        config = tmp_path / "workers.toml"
        await _until(lambda: f'name = "sglang-{w.port}"' in config.read_text(), 15.0)
        text = config.read_text()
        assert 'engine = "sglang"' in text and 'model = "meta-llama/Llama-3.1-8B-Instruct"' in text
        assert "gpus = []" in text and f'metrics-page = "{PAGE}"' in text  # no GPU on this node: none claimed
        # Stop keeps its confirmation: "n" sends nothing, "y" sends TERM to its API server, which shuts down.
        await pilot.press("s")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("n")
        await asyncio.sleep(0.5)
        assert found.poll() is None
        await pilot.press("s")
        await pilot.pause()
        await pilot.press("y")
        await _until(lambda: found.poll() is not None, 15.0)
        assert found.returncode is not None
    client.close()
