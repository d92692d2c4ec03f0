"""`amdtop web` in headless Chromium through a real websocket: the token, the read-only viewers, the dashboard's
text as the browser received it, a screenshot, and 20 tabs opened and closed against one serve."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import httpx
import psutil
import pytest

from amdtop.serve.client import ServeClient
from amdtop.serve.wire import socket_path
from tests.web.cdp import CHROMIUM, Cdp, Chromium, free_port

pytestmark = [
    pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed (apt-get install -y chromium)"),
    pytest.mark.serial,  # the demo workers' fixed ports, a browser, and memory measured over a minute
]

AMDTOP = Path(sys.executable).with_name("amdtop")
SCREENSHOT = Path(__file__).resolve().parents[2] / "docs" / "web-dashboard.png"
"""Rewritten when AMDTOP_WEB_SCREENSHOT=1 (the README shows it)."""


@dataclass
class Stack:
    serve: subprocess.Popen[bytes]
    web: subprocess.Popen[str]
    state: Path
    url: str
    token: str
    stderr_line: str


def _start(tmp: Path, *web_args: str) -> Stack:
    state, config = tmp / "state", tmp / "none.toml"
    common = ["--state-dir", str(state), "--config", str(config)]
    serve = subprocess.Popen(
        [str(AMDTOP), "serve", "--demo", "--interval", "0.5", *common, "--listen", f"127.0.0.1:{free_port()}"],
        stdout=subprocess.DEVNULL, stderr=(tmp / "serve.log").open("w"),
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while not socket_path(state).exists():
        assert serve.poll() is None and time.monotonic() < deadline, (tmp / "serve.log").read_text()
        time.sleep(0.1)
    port = free_port()
    web = subprocess.Popen(
        [str(AMDTOP), "web", *common, "--listen", f"127.0.0.1:{port}", *web_args],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "AMDTOP_TEST_SECRET": "do-not-leak"},
    )  # fmt: skip
    assert web.stderr is not None
    line = web.stderr.readline()
    match = re.search(r"at (http://127\.0\.0\.1:\d+/)\?token=(\S+)$", line.strip())
    assert match, line
    base, token = match.groups()
    for _ in range(100):
        try:
            httpx.get(base, timeout=2)
            break
        except httpx.TransportError:
            time.sleep(0.1)
    return Stack(serve, web, state, base, token, line)


def _stop(stack: Stack) -> None:
    for proc in (stack.web, stack.serve):
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    s = _start(tmp_path)
    try:
        yield s
    finally:
        _stop(s)


def _viewer_pids(state: Path) -> list[int]:
    client = ServeClient(state)
    try:
        return [p for p in client.call("stats", timeout=30)["viewer_pids"] if p != os.getpid()]
    finally:
        client.close()


async def _wait_text(cdp: Cdp, session: str, *texts: str, timeout: float = 90.0) -> str:
    deadline = time.monotonic() + timeout
    text = ""
    while time.monotonic() < deadline:
        text = cdp.terminal_text(session)
        if all(t in text for t in texts):
            return text
        await asyncio.sleep(0.3)
    raise AssertionError(f"{texts!r} not in what the page received:\n{text[-3000:]}")


def test_token_is_required_and_written_owner_only(stack: Stack) -> None:
    token_file = stack.state / "web-token"
    assert token_file.read_text().strip() == stack.token
    assert token_file.stat().st_mode & 0o777 == 0o600
    assert "read-only" in stack.stderr_line
    assert httpx.get(stack.url).status_code == 401
    assert httpx.get(stack.url, params={"token": "wrong"}).status_code == 401
    assert httpx.get(stack.url + "ws").status_code == 401
    assert httpx.get(stack.url + "static/js/textual.js").status_code == 401
    assert httpx.get(stack.url, headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert httpx.get(stack.url, headers={"Authorization": f"Bearer {stack.token}"}).status_code == 200
    first = httpx.get(stack.url, params={"token": stack.token})
    assert first.status_code == 200
    cookie = first.cookies.get("amdtop_web_token")
    assert cookie == stack.token
    assert httpx.get(stack.url + "static/js/textual.js", cookies={"amdtop_web_token": cookie}).status_code == 200


def test_browser_shows_the_dashboard_read_only_through_a_real_websocket(stack: Stack, tmp_path: Path) -> None:
    async def go() -> None:
        browser = Chromium(tmp_path / "profile")
        try:
            async with aiohttp.ClientSession() as http:
                version = await browser.version(http)
                async with http.ws_connect(version["webSocketDebuggerUrl"], max_msg_size=0) as ws:
                    cdp = Cdp(ws)
                    _target, session = await cdp.open_page(f"{stack.url}?token={stack.token}")
                    serve_pid = stack.serve.pid
                    await _wait_text(cdp, session, f"attached to amdtop serve (pid {serve_pid})", "llama-70b")
                    await asyncio.sleep(2)  # a few frames drawn
                    shot = tmp_path / "web.png"
                    await cdp.screenshot(session, shot)
                    await _wait_text(cdp, session, "read-only")
                    # One thin viewer per tab, attached to the serve, read-only. (Its footer keys are not checked: a
                    # headless tab never has focus, and Textual leaves the footer empty while the browser says blur.)
                    pids = _viewer_pids(stack.state)
                    assert len(pids) == 1
                    viewer = psutil.Process(pids[0])
                    assert "--attach-only" in viewer.cmdline() and "--readonly" in viewer.cmdline()
                    env = viewer.environ()
                    assert "AMDTOP_TEST_SECRET" not in env and env.get("TEXTUAL_DRIVER")
                    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000
                    if os.environ.get("AMDTOP_WEB_SCREENSHOT"):
                        shutil.copy(shot, SCREENSHOT)
        finally:
            browser.close()

    asyncio.run(go())


def test_control_allowed_only_with_allow_control(tmp_path: Path) -> None:
    stack = _start(tmp_path, "--allow-control")
    try:
        assert "control allowed" in stack.stderr_line

        async def go() -> None:
            ws_url = stack.url.replace("http", "ws") + "ws?width=200&height=50"
            async with (
                aiohttp.ClientSession(cookies={"amdtop_web_token": stack.token}) as http,
                http.ws_connect(ws_url) as ws,
            ):
                    received = ""
                    deadline = time.monotonic() + 90
                    while "attached to amdtop serve" not in received and time.monotonic() < deadline:
                        msg = await asyncio.wait_for(ws.receive(), 60)
                        if msg.type == aiohttp.WSMsgType.BINARY:
                            received += msg.data.decode("utf-8", "replace")
                    await asyncio.sleep(1)
                    assert "attached to amdtop serve" in received and "read-only" not in received
                    pids = _viewer_pids(stack.state)
                    assert len(pids) == 1 and "--readonly" not in psutil.Process(pids[0]).cmdline()

        asyncio.run(go())
    finally:
        _stop(stack)


def test_twenty_tabs_opened_and_closed_serve_memory_flat(stack: Stack, tmp_path: Path) -> None:
    serve = psutil.Process(stack.serve.pid)

    async def one_tab(cdp: Cdp) -> None:
        target, session = await cdp.open_page(f"{stack.url}?token={stack.token}")
        await _wait_text(cdp, session, "attached to amdtop serve")
        await cdp.close_page(target)

    async def go() -> tuple[int, int]:
        browser = Chromium(tmp_path / "profile")
        try:
            async with aiohttp.ClientSession() as http:
                version = await browser.version(http)
                async with http.ws_connect(version["webSocketDebuggerUrl"], max_msg_size=0) as ws:
                    cdp = Cdp(ws)
                    for _ in range(3):  # warm: the first viewers fill the serve's caches and pools
                        await one_tab(cdp)
                    before = serve.memory_info().rss
                    for _ in range(20):
                        await one_tab(cdp)
                        cdp.events.clear()
                    deadline = time.monotonic() + 60
                    while _viewer_pids(stack.state) and time.monotonic() < deadline:
                        await asyncio.sleep(0.5)
                    return before, serve.memory_info().rss
        finally:
            browser.close()

    before, after = asyncio.run(go())
    assert _viewer_pids(stack.state) == []  # every tab's viewer left the serve
    assert after - before < 8 << 20, (before, after)
    assert stack.serve.poll() is None
