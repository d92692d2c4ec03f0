"""Keep-alive connections for the status pass's GETs (amdtop/supervisor/bounded_get.py, KeptConnections): one
connection for many calls, a connection the server closed replaced within the call, the call's deadline and body cap
kept on a reused connection, POSTs never kept or sent twice. A real HTTP/1.1 server on loopback."""

from __future__ import annotations

import http.server
import threading
import time
from collections.abc import Iterator

import pytest

from amdtop.supervisor.bounded_get import KeptConnections, TooLarge


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    connections = 0
    posts = 0
    mode = "ok"

    def setup(self) -> None:
        type(self).connections += 1
        super().setup()

    def do_GET(self) -> None:
        cls = type(self)
        if cls.mode == "slow":
            body = b"x" * 100
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            for i in range(0, len(body), 10):
                self.wfile.write(body[i : i + 10])
                self.wfile.flush()
                time.sleep(0.3)
            return
        body = b"y" * (2048 if cls.mode == "big" else 16)
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        if cls.mode == "close":
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        type(self).posts += 1
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[tuple[http.server.ThreadingHTTPServer, str]]:
    _Handler.connections, _Handler.posts, _Handler.mode = 0, 0, "ok"
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        yield srv, f"http://127.0.0.1:{srv.server_address[1]}"
    finally:
        srv.shutdown()
        srv.server_close()


def test_calls_share_one_connection(server: tuple[http.server.ThreadingHTTPServer, str]) -> None:
    _, url = server
    pool = KeptConnections()
    for path in ("/health", "/metrics", "/load") * 3:
        assert pool.request(url, path) == (200, b"y" * 16)
    assert _Handler.connections == 1 and pool.opened == 1
    pool.close()


def test_a_connection_the_server_closed_is_replaced_within_the_call(
    server: tuple[http.server.ThreadingHTTPServer, str],
) -> None:
    _, url = server
    pool = KeptConnections()
    assert pool.request(url, "/health")[0] == 200
    ((conn, _),) = pool._idle.values()
    assert conn.sock is not None
    # The server's end goes away (a restarted worker, an idle timeout): the kept socket is dead.
    _Handler.mode = "close"
    assert pool.request(url, "/health")[0] == 200  # this answer says close: nothing kept
    assert not pool._idle
    _Handler.mode = "ok"
    assert pool.request(url, "/health")[0] == 200
    assert pool.request(url, "/health")[0] == 200
    assert pool.opened == 2
    pool.close()


def test_a_stale_kept_connection_is_retried_once_on_a_fresh_one(
    server: tuple[http.server.ThreadingHTTPServer, str],
) -> None:
    _, url = server
    pool = KeptConnections()
    assert pool.request(url, "/health")[0] == 200
    ((conn, _),) = pool._idle.values()
    conn.sock.shutdown(2)  # the connection dies under the pool (as when the server closed it meanwhile)
    assert pool.request(url, "/health") == (200, b"y" * 16)
    assert pool.opened == 2
    pool.close()


def test_an_idle_connection_past_its_age_is_not_reused(server: tuple[http.server.ThreadingHTTPServer, str]) -> None:
    _, url = server
    pool = KeptConnections(idle_s=0.05)
    assert pool.request(url, "/health")[0] == 200
    time.sleep(0.1)
    assert pool.request(url, "/health")[0] == 200
    assert pool.opened == 2 and _Handler.connections == 2
    pool.close()


def test_the_deadline_and_the_cap_hold_on_a_kept_connection(
    server: tuple[http.server.ThreadingHTTPServer, str],
) -> None:
    _, url = server
    pool = KeptConnections()
    assert pool.request(url, "/health")[0] == 200  # kept
    _Handler.mode = "slow"  # 100 bytes, 10 every 0.3 s: 3 s
    started = time.monotonic()
    with pytest.raises(TimeoutError):
        pool.request(url, "/metrics", deadline_s=0.8)
    assert time.monotonic() - started < 1.4
    assert not pool._idle  # the connection of a failed call is closed, not kept
    _Handler.mode = "big"
    with pytest.raises(TooLarge):
        pool.request(url, "/metrics", max_body=1024)
    assert not pool._idle
    pool.close()


def test_posts_go_on_their_own_connection_once(server: tuple[http.server.ThreadingHTTPServer, str]) -> None:
    _, url = server
    pool = KeptConnections()
    assert pool.request(url, "/sleep?level=1", method="POST")[0] == 200
    assert pool.request(url, "/wake_up", method="POST")[0] == 200
    assert _Handler.posts == 2 and _Handler.connections == 2 and pool.opened == 0 and not pool._idle
    pool.close()
