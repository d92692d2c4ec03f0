"""The DP=2 x TP=4 demo worker end to end: real simulated server processes, real HTTP on loopback, the pipeline.

Two TP groups of 4 (0-3, 4-7), per-engine metrics, one imbalance judgement per group, and sleep/wake through the
server's dev-mode endpoints (the worker turns ``asleep``, its VRAM drop is expected, no flag is raised for it).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from amdtop.errors import AmdtopError
from amdtop.model import FlagKind, WorkerState
from amdtop.pipeline.producer import NodePipeline
from amdtop.report import frame_json
from amdtop.supervisor import Supervisor
from amdtop.supervisor.demo import DEMO_LAYOUT_ENV, demo_profiles_text
from amdtop.telemetry.sim import SimBackend
from tests.gates import PASS

PORT_BASE = 18460


@pytest.fixture
def dp_demo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Supervisor, SimBackend]]:
    monkeypatch.setenv(DEMO_LAYOUT_ENV, "dp")
    sim = SimBackend()
    sup = Supervisor(tmp_path / "x.toml", tmp_path / "st", gate=PASS, topology=sim.topology(), demo=True, sim=sim,
                     demo_port_base=PORT_BASE)  # fmt: skip
    try:
        yield sup, sim
    finally:
        sup.stop("deepseek-moe", grace=5)
        sup.close()


def _ready(sup: Supervisor, state: WorkerState = WorkerState.READY, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while sup.status_one("deepseek-moe").state is not state:
        assert time.monotonic() < deadline, sup.status_one("deepseek-moe")
        time.sleep(0.2)


def test_dp_demo_profile_is_off_the_default_demo() -> None:
    topo = SimBackend().topology()
    assert "deepseek-moe" not in demo_profiles_text(topo, PORT_BASE)
    text = demo_profiles_text(topo, PORT_BASE, "dp")
    assert "data-parallel-size = 2" in text and "gpus = [0, 1, 2, 3, 4, 5, 6, 7]" in text


def test_dp_worker_runs_two_engines_and_two_tp_groups(dp_demo: tuple[Supervisor, SimBackend]) -> None:
    sup, sim = dp_demo
    assert sup.names() == ["deepseek-moe"]
    assert sup.profile("deepseek-moe").layout.summary() == "DP2xTP4+EP"
    sup.launch("deepseek-moe")
    _ready(sup)
    pipe = NodePipeline(sim, sup, discover=False, window_s=0.0, workers_every_s=0.0)
    st = sup.status_one("deepseek-moe")
    assert st.engine is not None and [e.engine for e in st.engine.engines] == ["0", "1"]
    sup.demo_load()(sup.status())  # type: ignore[misc]
    frame = pipe.tick()
    groups = frame.groups_of("deepseek-moe")
    assert [(g.dp_rank, g.gpus, g.label) for g in groups] == [
        (0, (0, 1, 2, 3), "deepseek-moe/dp0"),
        (1, (4, 5, 6, 7), "deepseek-moe/dp1"),
    ]
    doc = frame_json(frame)
    [w] = doc["workers"]
    assert w["layout"]["dp"] == 2 and w["layout"]["tp"] == 4 and w["layout"]["expert_parallel"] is True
    assert [g["gpus"] for g in w["layout"]["tp_groups"]] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert [e["engine"] for e in w["engines"]] == ["0", "1"]
    # The two replicas sit on different NUMA nodes by design: no TP placement flag for spanning them.
    assert not frame.flags_of(FlagKind.TP_PLACEMENT)
    # The exporter keeps one spread series per worker (no duplicate label sets): the more uneven replica's.
    from amdtop.exporter.families import build_families

    [spread] = [f for f in build_families(frame) if f.name == "amdtop_tp_spread_percent"]
    util = [s.value for s in spread.samples if s.labels["metric"] == "util_pct"]
    assert util == [max(g.util_spread_pct or 0.0 for g in groups)]


def test_sleep_and_wake_through_dev_mode(dp_demo: tuple[Supervisor, SimBackend]) -> None:
    sup, sim = dp_demo
    sup.launch("deepseek-moe")
    _ready(sup)
    assert "sleeping" in sup.sleep("deepseek-moe", level=1)
    time.sleep(0.3)  # a step in flight finishes
    tokens = _tokens(sup)
    time.sleep(0.6)
    assert _tokens(sup) == tokens  # asleep: no step runs (the demo's background load waits)
    st = sup.status_one("deepseek-moe")
    assert st.state is WorkerState.ASLEEP and st.engine is not None and st.engine.sleep_level == 1
    sup.demo_load()([st])  # type: ignore[misc]
    assert all(sim.sample().gpus[i].vram_used_bytes < 10 * 1024**3 for i in range(8))  # type: ignore[operator]
    pipe = NodePipeline(sim, sup, discover=False, window_s=0.0, workers_every_s=0.0)
    frame = pipe.tick()
    assert frame.worker("deepseek-moe").state is WorkerState.ASLEEP  # type: ignore[union-attr]
    assert not frame.flags_of(FlagKind.GPU_LOST, FlagKind.TP_IMBALANCE)
    assert "awake" in sup.sleep("deepseek-moe", wake=True)
    _ready(sup)
    deadline = time.monotonic() + 10
    while _tokens(sup) == tokens:
        assert time.monotonic() < deadline, "no token after wake_up"
        time.sleep(0.2)


def _tokens(sup: Supervisor) -> float:
    import httpx

    from amdtop.vllm_scrape import Scrape

    url = sup.status_one("deepseek-moe").url or ""
    return Scrape.parse(httpx.get(f"{url}/metrics", timeout=5).text).total("generation_tokens") or 0.0


def test_sleep_says_dev_mode_is_off(tmp_path: Path) -> None:
    sim = SimBackend()
    sup = Supervisor(tmp_path / "x.toml", tmp_path / "st", gate=PASS, topology=sim.topology(), demo=True, sim=sim,
                     demo_port_base=PORT_BASE + 5)  # fmt: skip
    try:
        sup.launch("mistral-7b")  # the default demo: no VLLM_SERVER_DEV_MODE
        deadline = time.monotonic() + 60
        while sup.status_one("mistral-7b").state is not WorkerState.READY:
            assert time.monotonic() < deadline
            time.sleep(0.2)
        with pytest.raises(
            AmdtopError, match=r"worker\[mistral-7b\]: the server does not expose /sleep \(404\).*dev mode is off"
        ):
            sup.sleep("mistral-7b")
    finally:
        sup.stop("mistral-7b", grace=5)
        sup.close()
