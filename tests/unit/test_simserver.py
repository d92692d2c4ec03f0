"""The simulated OpenAI server: vllm-serve argv, endpoints, SSE shape, /metrics counters."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from amdtop.simserver.__main__ import config_from_argv
from tests.unit.simproc import simserver

pytestmark = pytest.mark.timeout(60)


def test_accepts_vllm_serve_argv_and_ignores_unknown_pairs() -> None:
    cfg, dropped = config_from_argv(
        ["/models/llama", "--tensor-parallel-size", "4", "--port", "8001", "--max-num-seqs", "16", "--capacity", "64",
         "--gpu-memory-utilization", "0.9", "--block-size", "16", "--max-model-len", "4096", "--foo", "bar",
         "--enforce-eager", "--kv-cache-dtype=fp8"]
    )  # fmt: skip
    assert (cfg.model, cfg.tp, cfg.port, cfg.max_model_len) == ("/models/llama", 4, 8001, 4096)
    assert cfg.capacity == 16  # never more running sequences than max-num-seqs
    assert dropped == ["--foo", "bar", "--enforce-eager", "--kv-cache-dtype=fp8"]


def _sse(text: str) -> list[str]:
    return [line[6:] for line in text.split("\n\n") if line.startswith("data: ")]


def test_endpoints_stream_and_metrics() -> None:
    with simserver(18119, "--capacity", "2", "--tokens-per-s", "500", "--ttft-ms", "1", "--fail-after", "3"):
        base = "http://127.0.0.1:18119"
        assert httpx.get(f"{base}/health").status_code == 200
        assert httpx.get(f"{base}/v1/models").json()["data"][0]["id"] == "sim"
        assert httpx.post(f"{base}/tokenize", json={"prompt": "the gpu node"}).json()["count"] == 4  # BOS + 3
        body = {
            "model": "sim",
            "prompt": "a b",
            "max_tokens": 5,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        events = _sse(httpx.post(f"{base}/v1/completions", json=body).text)
        assert events[-1] == "[DONE]"
        docs = [json.loads(e) for e in events[:-1]]
        assert [d["choices"][0]["finish_reason"] for d in docs[:5]] == [None] * 4 + ["length"]
        assert docs[5]["choices"] == [] and docs[5]["usage"]["completion_tokens"] == 5
        chat = {"model": "sim", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, "stream": True}
        cdocs = [json.loads(e) for e in _sse(httpx.post(f"{base}/v1/chat/completions", json=chat).text)[:-1]]
        assert cdocs[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
        assert len(cdocs) == 3  # role opener + 2 tokens, no usage chunk without include_usage
        plain = httpx.post(f"{base}/v1/completions", json={"prompt": "x", "max_tokens": 3}).json()
        assert plain["usage"]["completion_tokens"] == 3
        assert httpx.post(f"{base}/v1/completions", json=body).status_code == 500  # 4th request: --fail-after 3
        metrics = httpx.get(f"{base}/metrics").text
    assert re.search(r'^vllm:generation_tokens_total\{engine="0",model_name="sim"\} 10\.0$', metrics, re.M)
    assert re.search(r'^vllm:request_success_total\{.*finished_reason="length".*\} 3\.0$', metrics, re.M)
    for name in ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
                 "vllm:prompt_tokens_total", "vllm:time_to_first_token_seconds_bucket"):  # fmt: skip
        assert name in metrics


def test_stopped_with_a_kept_connection_open_its_log_says_no_error(tmp_path: Path) -> None:
    """amdtop's status pass keeps its connection to a server between passes: SIGTERM with one open must end the
    simulated server as quietly as uvicorn does (a CancelledError traceback made a found server read as crashed)."""
    port = 18123
    log = tmp_path / "serve.log"
    argv = [sys.executable, "-m", "amdtop.simserver", "--port", str(port), "--model", "sim"]
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=2) as kept:
            deadline = time.monotonic() + 20
            while True:
                try:
                    if kept.get("/health").status_code == 200:
                        break
                except httpx.HTTPError:
                    assert time.monotonic() < deadline, log.read_text()
                    time.sleep(0.05)
            assert kept.get("/metrics").status_code == 200  # the connection stays open in the pool
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = log.read_text()
    assert "Traceback" not in text and "CancelledError" not in text, text
