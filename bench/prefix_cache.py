"""Prompt tokens served from vLLM's prefix cache during a ramp step: salted prompts (what amdtop sends) against the
same prompts re-sent as they are (what it sent before), read from the server's `vllm:prefix_cache_*` counters.

Usage: python bench/prefix_cache.py --url http://127.0.0.1:18010 --model tiny-llama [--input-len 300]
       [--concurrency 2] [--seconds 4]
The server needs vLLM's default prefix caching: the e2e profile (tests/e2e/conftest.py) turns it off.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from unittest import mock

import httpx

from amdtop.ramp import client as ramp_client
from amdtop.ramp.client import load_spec, run_step
from amdtop.supervisor.metrics import parse_samples


def counters(url: str) -> dict[str, float]:
    s = parse_samples(httpx.get(f"{url}/metrics", timeout=10).text)
    return {name: s.get(f"vllm:prefix_cache_{name}_total", 0.0) for name in ("queries", "hits")}


async def step(url: str, model: str, input_len: int, concurrency: int, seconds: float) -> tuple[float, int]:
    spec = await load_spec(url, model, input_len, 64)
    result, _ = await run_step(spec, concurrency, warmup_s=1.0, duration_s=seconds)
    return result.to_json()["mean_ttft_ms"], result.all_requests


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--input-len", type=int, default=300)
    ap.add_argument("--concurrency", type=int, default=2)
    ap.add_argument("--seconds", type=float, default=4.0)
    args = ap.parse_args()
    for label, salted in (("salted (amdtop)", True), ("repeated prompts", False)):
        before = counters(args.url)
        if salted:
            ttft, n = asyncio.run(step(args.url, args.model, args.input_len, args.concurrency, args.seconds))
        else:
            with mock.patch.object(ramp_client, "salt", lambda _n: "all all all all "):  # one fixed opening
                ttft, n = asyncio.run(step(args.url, args.model, args.input_len, args.concurrency, args.seconds))
        after = counters(args.url)
        if after["queries"] == before["queries"]:
            sys.exit("prefix_cache.py: error: the server counted no prefix-cache queries; start it without "
                     "--no-enable-prefix-caching (the e2e profile sets it)")  # fmt: skip
        print(
            f"{label:17s}: {n} requests, mean TTFT {ttft:.1f} ms, prompt tokens queried "
            f"{after['queries'] - before['queries']:.0f}, served from cache {after['hits'] - before['hits']:.0f}"
        )


if __name__ == "__main__":
    main()
