"""Minimal HTTP/1.1 on asyncio streams: request parsing, keep-alive, plain and chunked (SSE) responses."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any

REASONS = {
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    404: "Not Found",
    405: "Method Not Allowed",
    500: "Internal Server Error",
}
MAX_BODY = 16 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class HttpRequest:
    """One parsed request."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    peer: str

    @property
    def keep_alive(self) -> bool:
        """HTTP/1.1 default keep-alive unless the client asks to close."""
        return self.headers.get("connection", "").lower() != "close"

    def json(self) -> Any:
        """The body decoded as JSON (raises ValueError on bad input)."""
        return json.loads(self.body or b"{}")


async def read_request(reader: asyncio.StreamReader, peer: str) -> HttpRequest | None:
    """Read one request; ``None`` at a clean end of the connection."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, ConnectionError):
        return None
    except asyncio.LimitOverrunError:
        return None
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) < 2:
        return None
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if ":" in line:
            k, v = line.split(":", 1)
            headers[k.strip().lower()] = v.strip()
    length = int(headers.get("content-length", "0") or 0)
    if length > MAX_BODY:
        return None
    body = await reader.readexactly(length) if length else b""
    return HttpRequest(parts[0].upper(), parts[1].split("?", 1)[0], headers, body, peer)


def response_bytes(status: int, body: bytes, content_type: str = "application/json", keep_alive: bool = True) -> bytes:
    """A complete response with Content-Length."""
    head = (
        f"HTTP/1.1 {status} {REASONS.get(status, 'OK')}\r\n"
        f"content-type: {content_type}\r\ncontent-length: {len(body)}\r\n"
        f"connection: {'keep-alive' if keep_alive else 'close'}\r\n\r\n"
    )
    return head.encode("latin-1") + body


def json_response(status: int, doc: Any, keep_alive: bool = True) -> bytes:
    """A JSON response."""
    return response_bytes(status, json.dumps(doc).encode(), keep_alive=keep_alive)


def sse_head() -> bytes:
    """Headers of a streamed (chunked) ``text/event-stream`` response."""
    return (
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\n"
        b"transfer-encoding: chunked\r\nconnection: keep-alive\r\n\r\n"
    )


def sse_event(payload: str) -> bytes:
    """One ``data: ...`` event as one HTTP chunk."""
    data = f"data: {payload}\n\n".encode()
    return f"{len(data):x}\r\n".encode("latin-1") + data + b"\r\n"


SSE_END = b"0\r\n\r\n"
