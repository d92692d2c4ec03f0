"""Deterministic dashboard apps for Pilot and snapshot tests: seeded sim, frozen clock, fixed hostname, no /proc."""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import tui.app
from amdtop import runtime
from amdtop.control import DemoLoad
from amdtop.gpuprocs import ProcessHost
from amdtop.logread.kernel.monitor import KernelFaultMonitor
from amdtop.logread.rccl.monitor import LogMonitor
from amdtop.pipeline import NodeFrame, WorkerSource
from amdtop.runtime import LocalService, NodeParts, NodeSpec
from amdtop.runtime.node import Node
from amdtop.telemetry.base import TelemetryBackend
from amdtop.telemetry.sim import SimBackend
from tests.tui.demo_control import DemoControl, Scenario
from tui.app import AmdtopApp

FROZEN = 1764412345.0
NO_PROC = Path("/nonexistent-proc-for-tests")


class OpenedApp(AmdtopApp):
    """The dashboard over a node :func:`open_app` opened, as ``amdtop`` runs it (a :class:`LocalService`), with the
    test's handles onto that node: its runtime, pipeline, backend and worker stand-in, and :meth:`step`."""

    CSS_PATH = str(Path(tui.app.__file__).with_name(AmdtopApp.CSS_PATH))  # relative paths are the subclass module's

    def __init__(self, node: Node, service: LocalService, *, autopoll: bool, **display: Any) -> None:
        super().__init__(service, **display)
        self.node = node
        self.autopoll = autopoll

    @property
    def runtime(self) -> Any:
        return self.node.runtime

    @property
    def pipeline(self) -> Any:
        return self.node.pipeline

    @property
    def backend(self) -> Any:
        return self.node.backend

    @property
    def control(self) -> Any:
        """The worker stand-in the node's controls reach (a ``DemoControl`` records its calls)."""
        return self.node.control

    def on_mount(self) -> None:
        if self.autopoll:
            self.node.runtime.start()

    def on_unmount(self) -> None:
        self.node.close()  # Textual calls both handlers: then the dashboard unsubscribes from the closed node

    def step(self, n: int = 1) -> NodeFrame:
        """Tick the node ``n`` times synchronously (every subscriber gets each frame) and draw the last one."""
        self.node.pipeline.request_workers()
        frame = self.node.runtime.tick()
        for _ in range(n - 1):
            frame = self.node.runtime.tick()
        self._show(frame)
        return frame


def open_app(
    backend: TelemetryBackend,
    *,
    workers: WorkerSource | None = None,
    readonly: bool = False,
    interval: float = 1.0,
    autopoll: bool = False,
    state_dir: Path = NO_PROC,
    proc_root: Path = NO_PROC,
    discover: bool = False,
    follow_logs: bool = False,
    demo_load: DemoLoad | None = None,
    log_monitor: LogMonitor | None = None,
    kernel_faults: KernelFaultMonitor | None = None,
    host_procs: ProcessHost | None = None,
    clock: Callable[[], float] = time.time,
    **display: Any,
) -> OpenedApp:
    """Open a node over ``backend`` (a seeded simulator, a replayed capture, a sysfs fixture) and its worker stand-in
    by :func:`amdtop.runtime.open`, as ``amdtop`` opens one, and the dashboard over its :class:`LocalService`."""
    # A stand-in procfs stands for a stand-in node: no sysfs of the host running the tests is audited.
    sys_root = Path("/sys") if proc_root == Path("/proc") else proc_root
    spec = NodeSpec(config=NO_PROC / "amdtop.toml", state_dir=state_dir, sysfs_root=sys_root, interval=interval,
                    readonly=readonly)  # fmt: skip
    parts = NodeParts(backend=backend, workers=workers, demo_load=demo_load, proc_root=proc_root, discover=discover,
                      monitor=log_monitor, kernel=kernel_faults, host_procs=host_procs)  # fmt: skip
    service = runtime.open(spec, ui=True, follow_logs=follow_logs, kernel=kernel_faults is not None, parts=parts)
    return OpenedApp(service._node, service, autopoll=autopoll, interval=interval, clock=clock, state_dir=state_dir, **display)


def make_app(
    scenario: str = "mi300x-8",
    specs: list[Scenario] | None = None,
    *,
    lose: tuple[int, ...] = (),
    readonly: bool = False,
    **kw: Any,
) -> OpenedApp:
    sim = SimBackend(seed=7, scenario=scenario, clock=lambda: FROZEN, hostname="amdtop-demo")
    for gpu in lose:
        sim.lose_gpu(gpu)
    # The demo workers' logs, as the simulated servers write them (RCCL init included): the Logs pane shows them.
    control = DemoControl(sim, specs, clock=lambda: FROZEN, log_dir=Path(tempfile.mkdtemp(prefix="amdtop-demo-logs-")),
                          layout=kw.pop("demo_layout", "default"))  # fmt: skip
    kw.setdefault("follow_logs", True)
    return open_app(sim, workers=control, demo_load=control.demo_load(), readonly=readonly, clock=lambda: FROZEN, **kw)


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
