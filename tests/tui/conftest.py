"""Deterministic dashboard apps for Pilot and snapshot tests: seeded sim, frozen clock, fixed hostname, no /proc."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import pytest

from amdtop.telemetry.sim import SimBackend
from tests.tui.demo_control import DemoControl, Scenario
from tui.app import AmdtopApp

FROZEN = 1764412345.0
NO_PROC = Path("/nonexistent-proc-for-tests")


def make_app(
    scenario: str = "mi300x-8",
    specs: list[Scenario] | None = None,
    *,
    lose: tuple[int, ...] = (),
    readonly: bool = False,
    **kw: Any,
) -> AmdtopApp:
    sim = SimBackend(seed=7, scenario=scenario, clock=lambda: FROZEN, hostname="amdtop-demo")
    for gpu in lose:
        sim.lose_gpu(gpu)
    # The demo workers' logs, as the simulated servers write them (RCCL init included): the Logs pane shows them.
    control = DemoControl(sim, specs, clock=lambda: FROZEN, log_dir=Path(tempfile.mkdtemp(prefix="amdtop-demo-logs-")),
                          layout=kw.pop("demo_layout", "default"))  # fmt: skip
    kw.setdefault("autopoll", False)
    kw.setdefault("follow_logs", True)
    return AmdtopApp(
        sim,
        workers=control,
        control=control,
        demo_load=control.demo_load(),
        readonly=readonly,
        clock=lambda: FROZEN,
        proc_root=NO_PROC,
        discover=False,
        **{"state_dir": NO_PROC, **kw},
    )


def imbalanced_specs(sim_scenario: str = "mi300x-8") -> list[Scenario]:
    node0 = tuple(range(0, 32)) + tuple(range(64, 96))
    node1 = tuple(range(32, 64)) + tuple(range(96, 128))
    return [
        Scenario("llama-70b", (0, 1, 2, 3), 18200, (0.85, 0.84, 0.35, 0.83), (171, 171, 171, 171), node0, (0,), 0),
        Scenario("qwen-32b", (4, 5, 6, 7), 18201, (0.55, 0.57, 0.54, 0.56), (150, 150, 150, 150), node1, (1,), 1),
    ]


def numa_mismatch_specs() -> list[Scenario]:
    node0 = tuple(range(0, 32)) + tuple(range(64, 96))
    return [
        Scenario("llama-70b", (0, 1, 2, 3), 18200, (0.82, 0.80, 0.81, 0.79), (171, 171, 171, 171), node0, (0,), 0),
        # Pinned to node 0 while its GPUs sit on node 1: the classic wrong-socket launch.
        Scenario("qwen-32b", (4, 5, 6, 7), 18201, (0.55, 0.57, 0.54, 0.56), (150, 150, 150, 150), node0, (0,), 0),
    ]


async def settle(pilot: Any) -> None:
    await pilot.app.workers.wait_for_complete()
    await pilot.pause()
    await pilot.wait_for_scheduled_animations()


@pytest.fixture
def app_factory() -> Any:
    return make_app
