"""The ramp against an SGLang server (the simulated one in SGLang's flavour: its names, its OpenAI-compatible routes):
queueing at the running-requests cap with token usage low is ``admission``, and the advice names SGLang's flags."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from amdtop.ramp import Ramp, RampConfig
from amdtop.ramp.cause import explain
from tests.unit.simproc import simserver

pytestmark = pytest.mark.timeout(90)


def _ramp(port: int, tmp_path: Path) -> dict[str, Any]:
    cfg = RampConfig(
        url=f"http://127.0.0.1:{port}", concurrencies=(1, 2, 4, 8, 16), step_seconds=1.0, warmup_seconds=0.3,
        input_len=8, output_len=8, request_timeout_s=5.0, refine_points=0,
    )  # fmt: skip
    return asyncio.run(Ramp(cfg, tmp_path).run()).to_json()


@pytest.mark.quiet  # where the knee falls is a throughput measurement: alone, like test_ramp_cause's compute test
def test_sglang_capped_server_knee_is_admission_with_sglang_flags(tmp_path: Path) -> None:
    # --max-running-requests 4 and a token pool far larger than 16 short sequences: requests queue at the cap while
    # token usage stays near zero.
    with simserver(18151, "--flavour", "sglang", "--max-running-requests", "4", "--tokens-per-s", "100",
                   "--ttft-ms", "10"):  # fmt: skip
        doc = _ramp(18151, tmp_path)
    knee = doc["knee"]
    by_c = {s["concurrency"]: s for s in doc["steps"]}
    assert all(s["engine_kind"] == "sglang" and s["server_metrics"] for s in doc["steps"])
    assert by_c[16]["running_max"] <= 4 and by_c[16]["waiting_max"] > 0 and by_c[16]["kv_cache_usage_max"] < 0.5
    assert by_c[16]["kv_cache_tokens"] == 524288  # from sglang:max_total_num_tokens
    assert knee["cause"] == "admission", knee
    assert any("admission (max-running-requests)" in e for e in knee["evidence"])
    rec = doc["recommendation"]
    assert list(rec["changes"]) == ["max-running-requests"] and int(rec["changes"]["max-running-requests"]) > 4
    assert rec["flag"] == "max-running-requests" and "max-num-seqs" not in " ".join(rec["advice"])


def _step(c: int, **kw: Any) -> dict[str, Any]:
    return {"concurrency": c, "completed": 10, "output_throughput": 100.0 * min(c, 4), "server_metrics": True, **kw}


def test_admission_needs_low_token_usage_and_sglang() -> None:
    # Built step records: the verdict is a rule over them.
    low = [_step(4, engine_kind="sglang"),
           _step(8, engine_kind="sglang", running_max=4, waiting_max=4, kv_cache_usage_max=0.1)]  # fmt: skip
    assert explain(low, 4, input_len=8, output_len=8).cause == "admission"
    full = [_step(4, engine_kind="sglang"),
            _step(8, engine_kind="sglang", running_max=4, waiting_max=4, kv_cache_usage_max=0.95)]  # fmt: skip
    v = explain(full, 4, input_len=8, output_len=8)
    assert v.cause == "kv_cache" and "mem-fraction-static" in v.changes and "gpu-memory-utilization" not in v.changes
    vllm = [_step(4), _step(8, running_max=4, waiting_max=4, kv_cache_usage_max=0.1)]
    assert explain(vllm, 4, input_len=8, output_len=8).cause == "compute"
