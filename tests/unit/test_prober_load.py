"""``Prober.load``: vLLM's ``GET /load`` over real HTTP on loopback (the count the stall judge adds to the counters)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from amdtop.supervisor.metrics import Prober

ANSWERS: dict[str, tuple[int, bytes]] = {
    "/load": (200, json.dumps({"server_load": 4}).encode()),  # vLLM 0.32.0's body with --enable-server-load-tracking
}


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        code, body = ANSWERS.get(self.path, (404, b'{"detail":"Not Found"}'))
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def url() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_load_reads_server_load(url: str) -> None:
    assert Prober().load(url) == 4.0


@pytest.mark.parametrize(
    "answer",
    [(404, b'{"detail":"Not Found"}'), (200, b"not json"), (200, b"[1, 2]"), (200, b'{"server_load": true}')],
)
def test_load_is_none_where_the_server_does_not_say(url: str, answer: tuple[int, bytes]) -> None:
    # an older vLLM (no /load), a proxy's HTML, a list, a boolean: no count, never a made-up one
    ANSWERS["/load"], saved = answer, ANSWERS["/load"]
    try:
        assert Prober().load(url) is None
    finally:
        ANSWERS["/load"] = saved


def test_load_is_none_for_a_dead_endpoint() -> None:
    assert Prober(timeout_s=0.2).load("http://127.0.0.1:9") is None
