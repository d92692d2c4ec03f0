"""One HTTP call to a worker, bounded in time and bytes: what the prober's ``/health``, ``/metrics`` and ``/load``
calls go through.

A worker's server is untrusted input: a ``/metrics`` that never finishes (a ``Content-Length`` of 100 MB, then a byte
every 0.3 s) passed a per-receive timeout forever and froze every status pass behind it, and a 50 MB page cost 13 s
and 1 GB a scrape. So each call has one deadline for everything (connect, headers, body: every receive waits at most
the per-receive timeout and at most what is left, :class:`_DeadlineSocket`) and a cap on the body (a
``Content-Length`` over it is refused before a byte of the body is read).

Plain ``http.client``, one connection per call: the dashboard makes these calls every two seconds per worker, and an
httpx request cost 3.2x the CPU of this one (``bench/probe_http.py``).
"""

from __future__ import annotations

import http.client
import socket
import time
from collections.abc import Mapping
from urllib.parse import urlsplit

MAX_BODY = 4 << 20
"""Bytes of one answer: real ``/metrics`` pages are 50-70 KB (vLLM 0.32 on CPU, DP 2: tests/fixtures/vllm_metrics);
a page past 4 MiB is not a vLLM or SGLang page, and parsing it would cost the status pass about a second."""
DEADLINE_S = 2.0
"""One call, connect to last byte: four per-receive timeouts of the prober's 0.5 s."""
CHUNK = 64 << 10


class TooLarge(OSError):
    """The answer is over :data:`MAX_BODY`."""


class _DeadlineSocket(socket.socket):
    """A TCP socket whose every receive ends by one monotonic deadline (http.client reads the status line, the
    headers and the body through ``recv_into``)."""

    deadline = float("inf")
    per_recv = 0.5

    def recv_into(self, buffer: memoryview | bytearray, nbytes: int = 0, flags: int = 0) -> int:  # type: ignore[override]
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("the call's deadline passed")
        self.settimeout(min(self.per_recv, left))
        return super().recv_into(buffer, nbytes, flags)


def _connector(deadline: float, per_recv: float):  # type: ignore[no-untyped-def]
    """``socket.create_connection`` for ``http.client`` that makes :class:`_DeadlineSocket` sockets."""

    def create(address: tuple[str, int], timeout: float, source_address: object = None) -> socket.socket:
        host, port = address
        error: OSError | None = None
        for family, kind, proto, _, addr in socket.getaddrinfo(host, port, 0, socket.SOCK_STREAM):
            sock = _DeadlineSocket(family, kind, proto)
            sock.deadline, sock.per_recv = deadline, per_recv
            sock.settimeout(max(min(per_recv, deadline - time.monotonic()), 0.001))
            try:
                sock.connect(addr)
                return sock
            except OSError as exc:
                error = exc
                sock.close()
        raise error or OSError(f"{host}: no address")

    return create


def bounded_request(
    url: str,
    path: str,
    *,
    method: str = "GET",
    headers: Mapping[str, str] | None = None,
    timeout: float = 0.5,
    deadline_s: float = DEADLINE_S,
    max_body: int = MAX_BODY,
) -> tuple[int, bytes]:
    """``(status, body)`` of ``method path`` on ``url`` within ``deadline_s`` and ``max_body`` bytes; OSError (a
    TimeoutError past the deadline, :class:`TooLarge` over the cap), ``http.client.HTTPException`` or ValueError (a
    port that is not a number) otherwise. No keep-alive: a pooled connection to a worker outlives its server."""
    deadline = time.monotonic() + deadline_s
    parts = urlsplit(url)
    cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    conn = cls(parts.hostname or "127.0.0.1", parts.port, timeout=timeout)
    # TLS wraps the socket made here into the ssl module's own: its connect is bounded here, its reads each by the
    # timeout and together by the body loop's check below.
    conn._create_connection = _connector(deadline, timeout)  # type: ignore[attr-defined]
    try:
        conn.request(method, parts.path.rstrip("/") + path, headers={"Connection": "close", **(headers or {})})
        resp = conn.getresponse()
        length = resp.getheader("Content-Length", "")
        if length.strip().isdecimal() and int(length.strip()[:12]) > max_body:
            raise TooLarge(f"{url}{path}: {length.strip()[:12]} bytes, over the {max_body >> 20} MiB limit")
        chunks: list[bytes] = []
        size = 0
        while chunk := resp.read1(CHUNK):
            size += len(chunk)
            if size > max_body:
                raise TooLarge(f"{url}{path}: over the {max_body >> 20} MiB limit")
            if time.monotonic() > deadline:
                raise TimeoutError(f"{url}{path}: not finished in {deadline_s:g} s")
            chunks.append(chunk)
        return resp.status, b"".join(chunks)
    finally:
        conn.close()
