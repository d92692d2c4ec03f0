"""Every request of a ramp opens with its own salt, so vLLM's prefix cache never serves a repeated prompt."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest

from amdtop.ramp.client import LoadSpec, run_step
from amdtop.ramp.prompts import SALT_SPACE, SALT_WORDS_PER_REQUEST, Endpoint, build_prompts, salt

pytestmark = pytest.mark.timeout(60)


class Recorder(BaseHTTPRequestHandler):
    """A streaming completions endpoint that keeps every request body it was sent."""

    protocol_version = "HTTP/1.1"
    bodies: list[dict[str, Any]] = []

    def log_message(self, *args: object) -> None:
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        Recorder.bodies.append(body)
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        choice = {"delta": {"content": "x"}} if "messages" in body else {"text": "x"}
        events = [{"choices": [{"index": 0, **choice}]}] * body["max_tokens"]
        events.append({"choices": [], "usage": {"prompt_tokens": 8, "completion_tokens": body["max_tokens"]}})
        for data in [*(json.dumps(e) for e in events), "[DONE]"]:
            chunk = f"data: {data}\n\n".encode()
            self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        self.wfile.write(b"0\r\n\r\n")


@pytest.fixture
def recorder() -> Iterator[str]:
    Recorder.bodies = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_salts_are_distinct_and_of_fixed_width() -> None:
    salts = {salt(n) for n in range(5000)} | {salt(SALT_SPACE - 1 - n) for n in range(5000)}
    assert len(salts) == 10000
    assert {len(s.encode()) for s in salts} == {16}
    assert SALT_SPACE > 100_000
    # Consecutive requests differ in (nearly) every word, so a run's mean salt cost is the calibrated one.
    words = [salt(n).split() for n in range(1000)]
    changed = sum(sum(a != b for a, b in zip(words[i], words[i + 1], strict=True)) for i in range(999))
    assert changed > 0.9 * 4 * 999


@pytest.mark.parametrize("chat", [False, True])
def test_no_prompt_is_sent_twice(recorder: str, chat: bool) -> None:
    spec = LoadSpec(recorder, "m", ("alpha beta", "gamma delta epsilon"), 8, 2, chat=chat)
    step, reason = asyncio.run(run_step(spec, 3, warmup_s=0.1, duration_s=0.4))
    assert reason is None and step.all_requests > 10
    prompts = [b["messages"][0]["content"] if chat else b["prompt"] for b in Recorder.bodies]
    assert len(prompts) == len(Recorder.bodies) == step.all_requests
    assert len(set(prompts)) == len(prompts)  # no repeats within the step ...
    assert {p[16:] for p in prompts} == {"alpha beta", "gamma delta epsilon"}  # ... each a salt + one of the prompts
    # A second step (the ramp's next concurrency) does not start the salts over.
    asyncio.run(run_step(spec, 2, warmup_s=0.0, duration_s=0.2))
    again = [b["messages"][0]["content"] if chat else b["prompt"] for b in Recorder.bodies]
    assert len(set(again)) == len(again)


def test_prompts_leave_room_for_the_salt() -> None:
    async def go() -> tuple[str, ...]:
        async with httpx.AsyncClient(base_url="http://127.0.0.1:9") as c:  # no tokenizer: one word per token
            return await build_prompts(c, Endpoint("m", None, tokenizer=False), 32, 3)

    prompts = asyncio.run(go())
    assert {len(p.split()) for p in prompts} == {32 - SALT_WORDS_PER_REQUEST}
