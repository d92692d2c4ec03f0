"""A minimal Chrome DevTools Protocol client over aiohttp: enough to drive headless Chromium in the web tests."""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import re
import shutil
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import aiohttp

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
    "--no-first-run",
)  # fmt: skip
ANSI = re.compile(r"\x1b\[[0-9;?<>=]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(\x07|\x1b\\)|\x1b[()][A-Z0-9]|\x1b[=>NOPc78]")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Chromium:
    """Headless Chromium with a DevTools port; one page session at a time."""

    def __init__(self, profile: Path) -> None:
        assert CHROMIUM is not None
        self.port = free_port()
        self.proc = subprocess.Popen(
            [CHROMIUM, *FLAGS, "--window-size=1600,1000", f"--user-data-dir={profile}", f"--remote-debugging-port={self.port}", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip

    async def version(self, session: aiohttp.ClientSession, timeout: float = 60.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            try:
                async with session.get(f"http://127.0.0.1:{self.port}/json/version") as r:
                    return dict(await r.json())
            except aiohttp.ClientError:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.2)

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)


class Cdp:
    """One DevTools websocket (the browser's); page sessions through Target.attachToTarget(flatten)."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws
        self._ids = itertools.count(1)
        self._waiting: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self.events: list[dict[str, Any]] = []
        self._reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        async for msg in self.ws:
            data = json.loads(msg.data)
            if "id" in data and data["id"] in self._waiting:
                self._waiting.pop(data["id"]).set_result(data)
            else:
                self.events.append(data)

    async def send(self, method: str, session: str | None = None, **params: Any) -> dict[str, Any]:
        call_id = next(self._ids)
        fut: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._waiting[call_id] = fut
        message: dict[str, Any] = {"id": call_id, "method": method, "params": params}
        if session is not None:
            message["sessionId"] = session
        await self.ws.send_str(json.dumps(message))
        reply = await asyncio.wait_for(fut, 60)
        if "error" in reply:
            raise RuntimeError(f"{method}: {reply['error']}")
        return dict(reply.get("result") or {})

    async def open_page(self, url: str) -> tuple[str, str]:
        """A new tab at ``url`` with its network events recorded: (target id, session id)."""
        target = (await self.send("Target.createTarget", url="about:blank"))["targetId"]
        session = (await self.send("Target.attachToTarget", targetId=target, flatten=True))["sessionId"]
        await self.send("Network.enable", session)
        await self.send("Page.enable", session)
        await self.send("Page.navigate", session, url=url)
        return target, session

    async def close_page(self, target: str) -> None:
        await self.send("Target.closeTarget", targetId=target)

    def terminal_text(self, session: str) -> str:
        """What the page's terminal received over its websocket, escape sequences removed (the screen's text)."""
        chunks = []
        for event in self.events:
            if event.get("sessionId") != session or event.get("method") != "Network.webSocketFrameReceived":
                continue
            response = event["params"]["response"]
            payload = response["payloadData"]
            raw = base64.b64decode(payload) if response.get("opcode") == 2 else payload.encode()
            chunks.append(raw.decode("utf-8", "replace"))
        return ANSI.sub("", "".join(chunks))

    async def screenshot(self, session: str, path: Path) -> None:
        data = (await self.send("Page.captureScreenshot", session, format="png"))["data"]
        path.write_bytes(base64.b64decode(data))
