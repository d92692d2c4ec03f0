"""One HTTP call to a worker, bounded in time and bytes: what the prober's ``/health``, ``/metrics`` and ``/load``
calls go through.

A worker's server is untrusted input: a ``/metrics`` that never finishes (a ``Content-Length`` of 100 MB, then a byte
every 0.3 s) passed a per-receive timeout forever and froze every status pass behind it, and a 50 MB page cost 13 s
and 1 GB a scrape. So each call has one deadline for everything (connect, headers, body: every receive waits at most
the per-receive timeout and at most what is left, :class:`_DeadlineSocket`) and a cap on the body (a
``Content-Length`` over it is refused before a byte of the body is read).

Plain ``http.client`` (an httpx request cost 3.2x the CPU of this one, ``bench/probe_http.py``); the status pass's GETs
keep their connection between passes (:class:`KeptConnections`).
"""

from __future__ import annotations

import http.client
import socket
import threading
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
    port that is not a number) otherwise. One connection, closed after the call (:class:`KeptConnections` keeps
    them for a status pass's GETs)."""
    deadline = time.monotonic() + deadline_s
    parts = urlsplit(url)
    cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    conn = cls(parts.hostname or "127.0.0.1", parts.port, timeout=timeout)
    try:
        return _exchange(conn, url, parts.path, path, method, {"Connection": "close", **(headers or {})}, deadline,
                         deadline_s, timeout, max_body)  # fmt: skip
    finally:
        conn.close()


def _exchange(
    conn: http.client.HTTPConnection,
    url: str,
    base: str,
    path: str,
    method: str,
    headers: Mapping[str, str],
    deadline: float,
    deadline_s: float,
    timeout: float,
    max_body: int,
) -> tuple[int, bytes]:
    """One request and its whole answer on ``conn`` (opened here when it has no socket), every receive by
    ``deadline``; the body read to its end, so that a kept connection is ready for the next request."""
    # TLS wraps the socket made here into the ssl module's own: its connect is bounded here, its reads each by the
    # timeout and together by the body loop's check below.
    conn._create_connection = _connector(deadline, timeout)  # type: ignore[attr-defined]
    if isinstance(conn.sock, _DeadlineSocket):  # a kept connection: this call's deadline, not the last one's
        conn.sock.deadline = deadline
    conn.request(method, base.rstrip("/") + path, headers=dict(headers))
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
    resp.close()  # read to its end: the connection is free for the next request (a kept one)
    return resp.status, b"".join(chunks)


KEPT_IDLE_S = 4.0
"""A kept connection unused for longer is closed, not reused: uvicorn (vLLM, SGLang) closes an idle one after 5 s,
and a request on a connection the server has just closed fails."""
KEPT_MAX = 64
"""Connections kept at most (one per worker's server): the descriptors a status pass holds between passes."""
STALE = (http.client.RemoteDisconnected, http.client.BadStatusLine, BrokenPipeError, ConnectionResetError,
         ConnectionAbortedError)  # fmt: skip
"""What a request on a kept connection meets when the server closed it meanwhile (it restarted, or timed the
connection out): the GET is sent again once, on a fresh connection, within the same deadline."""


class KeptConnections:
    """Keep-alive HTTP connections for the status pass's GETs (``/health``, ``/metrics``, ``/load`` of each worker
    every two seconds): a connection per call cost the TCP handshake and teardown each time, about half of the
    call's CPU on the dev VM (``bench/probe_http.py``: 241 against 119 us a call). Every call keeps the bounds of
    :func:`bounded_request` (one deadline for everything, the retry on a stale connection included; the body cap). A
    connection goes back only after an answer read to its end; any error closes it. POSTs (sleep, wake) and HTTPS
    go one connection per call, as before: they are never sent twice. Safe from several threads (a connection is
    taken out while in use)."""

    def __init__(self, idle_s: float = KEPT_IDLE_S, most: int = KEPT_MAX) -> None:
        self.idle_s = idle_s
        self.most = most
        self._lock = threading.Lock()
        self._idle: dict[tuple[str, int | None], tuple[http.client.HTTPConnection, float]] = {}
        self.opened = 0
        """Connections made (tests, benches)."""

    def request(
        self,
        url: str,
        path: str,
        *,
        method: str = "GET",
        headers: Mapping[str, str] | None = None,
        timeout: float = 0.5,
        deadline_s: float = DEADLINE_S,
        max_body: int = MAX_BODY,
    ) -> tuple[int, bytes]:
        """As :func:`bounded_request`, on a kept connection where one is fresh."""
        parts = urlsplit(url)
        if method != "GET" or parts.scheme == "https":
            return bounded_request(url, path, method=method, headers=headers, timeout=timeout, deadline_s=deadline_s,
                                   max_body=max_body)  # fmt: skip
        deadline = time.monotonic() + deadline_s
        key = (parts.hostname or "127.0.0.1", parts.port)
        sent = dict(headers or {})
        conn = self._take(key)
        if conn is not None:
            try:
                return self._done(key, conn, _exchange(conn, url, parts.path, path, method, sent, deadline, deadline_s,
                                                       timeout, max_body))  # fmt: skip
            except STALE:
                conn.close()  # closed by the server meanwhile: once more on a fresh connection, same deadline
            except BaseException:
                conn.close()
                raise
        conn = http.client.HTTPConnection(key[0], key[1], timeout=timeout)
        with self._lock:
            self.opened += 1
        try:
            return self._done(key, conn, _exchange(conn, url, parts.path, path, method, sent, deadline, deadline_s,
                                                   timeout, max_body))  # fmt: skip
        except BaseException:
            conn.close()
            raise

    def _take(self, key: tuple[str, int | None]) -> http.client.HTTPConnection | None:
        now = time.monotonic()
        stale: list[http.client.HTTPConnection] = []
        with self._lock:
            got = self._idle.pop(key, None)
            for k, (c, at) in list(self._idle.items()):  # a worker gone leaves its connection here: closed in time
                if now - at > self.idle_s:
                    del self._idle[k]
                    stale.append(c)
        for c in stale:
            c.close()
        if got is None:
            return None
        if now - got[1] > self.idle_s:
            got[0].close()
            return None
        return got[0]

    def _done(
        self, key: tuple[str, int | None], conn: http.client.HTTPConnection, got: tuple[int, bytes]
    ) -> tuple[int, bytes]:
        """Keep ``conn`` for the next call (unless the server said it closes, or the pool is full)."""
        kept = False
        with self._lock:
            old = self._idle.pop(key, None)
            # No socket: the server answered ``Connection: close`` and http.client closed its end.
            if conn.sock is not None and len(self._idle) < self.most:
                self._idle[key] = (conn, time.monotonic())
                kept = True
        if old is not None:
            old[0].close()  # two threads called the same server at once: one connection is kept
        if not kept:
            conn.close()
        return got

    def close(self) -> None:
        """Close every kept connection."""
        with self._lock:
            idle, self._idle = self._idle, {}
        for c, _ in idle.values():
            c.close()
