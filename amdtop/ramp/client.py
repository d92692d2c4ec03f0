"""The load generator: closed-loop streaming requests on one httpx pool sized to the concurrency."""

from __future__ import annotations

import asyncio
import itertools
import json
import random
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from amdtop.ramp.pool import pooled_transport
from amdtop.ramp.prompts import SALT_SPACE, build_prompts, discover, salt
from amdtop.ramp.stats import RequestResult, StepResult, window_tokens
from amdtop.supervisor.metrics import bearer

FAILURE_BACKOFF_S = 0.05
"""Pause of a slot after a failed request so a dead endpoint is not hammered in a tight loop."""


@dataclass(frozen=True, slots=True)
class LoadSpec:
    """What every request of a ramp looks like."""

    url: str
    model: str
    prompts: tuple[str, ...]
    input_len: int
    output_len: int
    chat: bool = False
    request_timeout_s: float = 60.0
    """Longest silence between two chunks before a request counts as ``timeout``."""
    api_key: str | None = field(default=None, repr=False)
    """Sent as ``Authorization: Bearer`` with every request (a keyed vLLM answers 401 without it)."""


async def load_spec(url: str, model: str | None, input_len: int, output_len: int, num_prompts: int = 64) -> LoadSpec:
    """A spec for ``url``'s served model, its prompts built from the model's vocabulary (for scripts and tests)."""
    async with httpx.AsyncClient(base_url=url, timeout=10) as c:
        ep = await discover(c, url, model)
        prompts = await build_prompts(c, ep, input_len, num_prompts)
    return LoadSpec(url, ep.model, prompts, input_len, output_len)


def _payload(spec: LoadSpec, prompt: str) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": spec.model,
        "max_tokens": spec.output_len,
        "stream": True,
        "stream_options": {"include_usage": True},
        "ignore_eos": True,
    }  # no sampling settings: the server's defaults, as `vllm bench serve` sends
    if spec.chat:
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    return body


def _is_content(choice: dict[str, Any], chat: bool) -> bool:
    # Chat streams open with a role-only chunk ({"role": "assistant", "content": ""}): not a token, not TTFT.
    if not chat:
        return True
    delta = choice.get("delta") or {}
    return not ("role" in delta and not delta.get("content"))


def build_request(client: httpx.AsyncClient, spec: LoadSpec, prompt: str) -> httpx.Request:
    """The streaming request for one prompt, sent as it is."""
    path = "/v1/chat/completions" if spec.chat else "/v1/completions"
    body = json.dumps(_payload(spec, prompt)).encode()
    return client.build_request("POST", path, content=body, headers={"content-type": "application/json"})


_SALT_MARK = "\x00salt\x00"
_salts = itertools.count(random.randrange(SALT_SPACE))
"""One sequence for the whole process: later steps and later ramps must not repeat an earlier request's opening."""


class SaltedRequests:
    """The step's prompts, each sent with a unique :func:`salt` spliced in front of it.

    Bodies are assembled from pre-encoded halves; each slot owns one request object and swaps its body and
    Content-Length per send (slots run concurrently, a slot's own sends one after the other).
    """

    def __init__(self, client: httpx.AsyncClient, spec: LoadSpec) -> None:
        self._client = client
        self._spec = spec
        self._parts: list[tuple[bytes, bytes]] = []
        for prompt in spec.prompts:
            head, tail = json.dumps(_payload(spec, _SALT_MARK + prompt)).split(json.dumps(_SALT_MARK)[1:-1], 1)
            self._parts.append((head.encode(), tail.encode()))

    def for_slot(self) -> httpx.Request:
        return build_request(self._client, self._spec, self._spec.prompts[0])

    def next(self, req: httpx.Request, i: int) -> httpx.Request:
        head, tail = self._parts[i % len(self._parts)]
        body = head + salt(next(_salts)).encode() + tail
        req.stream = httpx.ByteStream(body)
        req._content = body  # what httpx.Request.content returns
        req.headers["Content-Length"] = str(len(body))
        return req


async def send_one(
    client: httpx.AsyncClient,
    spec: LoadSpec,
    request: httpx.Request | str,
    *,
    transport: httpx.AsyncBaseTransport | None = None,
) -> RequestResult:
    """Send one streaming request (a prebuilt request or a prompt) and time it; never raises for server failures.

    With ``transport`` (the client's own), the request goes straight to it: the client's per-response cookie
    extraction and redirect/auth handling cost ~10 % of the generator's CPU and a streaming benchmark needs none.
    """
    if isinstance(request, str):
        request = build_request(client, spec, request)
    st = time.perf_counter()
    ttft: float | None = None
    last = st
    itl: list[float] = []
    out_tokens = 0
    in_tokens = spec.input_len
    chunks = 0
    try:
        if transport is not None:
            resp = await transport.handle_async_request(request)
        else:
            resp = await client.send(request, stream=True)
        try:
            if resp.status_code != 200:
                text = (await resp.aread())[:200].decode(errors="replace")
                return RequestResult(st, time.perf_counter(), False, error=f"http_{resp.status_code}", detail=text)
            buf = b""
            done = False
            # Skip the content decoder when the body is not compressed (SSE never is in vLLM): less CPU per chunk.
            chunks_iter: AsyncIterator[bytes]
            if resp.headers.get("content-encoding") or not isinstance(resp.stream, httpx.AsyncByteStream):
                chunks_iter = resp.aiter_bytes()
            else:
                # The transport's stream itself: no decoder and no chunker layer per SSE event.
                chunks_iter = resp.stream.__aiter__()
            async for data in chunks_iter:
                now = time.perf_counter()
                buf = buf + data if buf else data
                while True:
                    cut = buf.find(b"\n\n")
                    if cut < 0:
                        break
                    event, buf = buf[:cut], buf[cut + 2 :]
                    if not event.startswith(b"data:"):
                        continue
                    payload = event[5:].strip()
                    if payload == b"[DONE]":
                        done = True
                        continue
                    # Fast path: a chunk with non-empty choices is a token (a quote inside generated text is escaped,
                    # so the marker cannot come from the text). Chat role-only openers still need a real parse.
                    if (b'"choices":[{' in payload or b'"choices": [{' in payload) and not (
                        spec.chat and b'"role"' in payload
                    ):
                        is_content = True
                    else:
                        doc = json.loads(payload)
                        if "error" in doc:
                            err = doc["error"]
                            msg = err.get("message", "") if isinstance(err, dict) else str(err)
                            return RequestResult(st, now, False, error="stream_error", detail=str(msg)[:200])
                        choices = doc.get("choices")
                        is_content = bool(choices) and _is_content(choices[0], spec.chat)
                        if not choices and (usage := doc.get("usage")):
                            out_tokens = int(usage.get("completion_tokens") or 0)
                            in_tokens = int(usage.get("prompt_tokens") or in_tokens)
                    if is_content:
                        chunks += 1
                        if ttft is None:
                            ttft = now - st
                        else:
                            itl.append(now - last)
                        last = now
            end = time.perf_counter()
            if ttft is None:
                return RequestResult(st, end, False, error="protocol", detail="no content chunk in the stream")
            if not done:
                return RequestResult(st, end, False, error="protocol", detail="stream ended without [DONE]")
            return RequestResult(
                st,
                end,
                True,
                ttft=ttft,
                itl=tuple(itl),
                e2el=last - st,
                input_tokens=in_tokens,
                output_tokens=out_tokens or chunks,
            )
        finally:
            await resp.aclose()
    except httpx.TimeoutException as exc:
        return RequestResult(st, time.perf_counter(), False, error="timeout", detail=type(exc).__name__)
    except (httpx.ConnectError, httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError) as exc:
        kind = "connect" if isinstance(exc, httpx.ConnectError) or ttft is None else "protocol"
        return RequestResult(st, time.perf_counter(), False, error=kind, detail=f"{type(exc).__name__}: {exc}"[:200])
    except (ValueError, httpx.HTTPError) as exc:
        return RequestResult(
            st, time.perf_counter(), False, error="protocol", detail=f"{type(exc).__name__}: {exc}"[:200]
        )


def make_client(spec: LoadSpec, concurrency: int) -> tuple[httpx.AsyncClient, httpx.AsyncHTTPTransport]:
    """One client whose pool holds exactly ``concurrency`` connections, and its transport."""
    timeout = httpx.Timeout(spec.request_timeout_s, connect=5.0)
    transport = pooled_transport(concurrency)
    client = httpx.AsyncClient(base_url=spec.url, transport=transport, timeout=timeout, headers=bearer(spec.api_key))
    return client, transport


async def run_step(
    spec: LoadSpec,
    concurrency: int,
    *,
    warmup_s: float,
    duration_s: float,
    stop: Callable[[], bool] = lambda: False,
    max_error_rate: float = 0.5,
    min_attempts_for_abort: int = 8,
    drain_timeout_s: float | None = None,
) -> tuple[StepResult, str | None]:
    """Keep exactly ``concurrency`` requests in flight for ``warmup_s + duration_s`` seconds.

    Requests that end inside the measurement window count; when the window closes no new request starts and the
    ones in flight may finish (up to ``drain_timeout_s``) so the server's token counters settle. Returns the step
    and an abort reason (``None`` when the step ran to its end).
    """
    cpu0, wall0 = time.thread_time(), time.perf_counter()
    w_start = wall0 + warmup_s
    w_end = w_start + duration_s
    window: list[RequestResult] = []
    everything: list[RequestResult] = []
    state: dict[str, Any] = {"abort": None, "issuing": True}
    error_abort = False
    client, transport = make_client(spec, concurrency)
    async with client:
        salted = SaltedRequests(client, spec)

        async def slot(k: int) -> None:
            i = k
            mine = salted.for_slot()
            while state["issuing"]:
                res = await send_one(client, spec, salted.next(mine, i), transport=transport)
                i += concurrency
                everything.append(res)
                if w_start <= res.end <= w_end and res.start >= wall0:
                    window.append(res)
                if not res.ok:
                    await asyncio.sleep(FAILURE_BACKOFF_S)

        tasks = [asyncio.ensure_future(slot(k)) for k in range(concurrency)]
        while time.perf_counter() < w_end:
            await asyncio.sleep(min(0.05, max(0.0, w_end - time.perf_counter())))
            if stop():
                state["abort"] = "stopped by user"
                break
            failed = sum(1 for r in everything if not r.ok)
            if len(everything) >= min_attempts_for_abort and failed / len(everything) > max_error_rate:
                state["abort"] = f"error rate {100 * failed / len(everything):.0f}% over {100 * max_error_rate:.0f}%"
                error_abort = True
                break
            if all(t.done() for t in tasks):
                break
        state["issuing"] = False
        w_close = min(time.perf_counter(), w_end)
        drain = drain_timeout_s if drain_timeout_s is not None else spec.request_timeout_s
        if state["abort"] is not None:
            drain = 0.0
        pending = set(tasks)
        drain_end = time.perf_counter() + drain
        # The drain looks at stop() too: a signal while requests finish ends the step now, not after the drain.
        while pending and not stop() and (left := drain_end - time.perf_counter()) > 0:
            _, pending = await asyncio.wait(pending, timeout=min(0.05, left))
        for t in pending:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    measured = max(0.0, w_close - w_start)
    streamed: tuple[float, float] | None = window_tokens(everything, w_start, w_close)
    if everything and (measured <= 0.0 or error_abort):
        # Aborted during warm-up, or for the error rate (judged over every request of the step, warm-up included: on
        # a loaded machine the check ran just after the window opened, with the failures still outside it): report
        # what ran so far, so the step shows the failures behind the abort.
        window = list(everything)
        measured = max(1e-9, max(r.end for r in everything) - wall0)
        streamed = None
    step = StepResult(
        concurrency=concurrency,
        duration=measured,
        results=tuple(window),
        client_cpu_s=time.thread_time() - cpu0,
        wall_s=time.perf_counter() - wall0,
        all_output_tokens=sum(r.output_tokens for r in everything if r.ok),
        all_requests=len(everything),
        window_tokens=streamed,
    )
    return step, state["abort"]
