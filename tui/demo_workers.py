"""In-memory workers for the demo node when the supervisor is not available, and for deterministic tests.

They set demand on the :class:`SimBackend` so the simulated GPUs follow them, and answer the supervisor's control
calls (launch/stop/restart/retune) by changing their own state; no process is started.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from amdtop.errors import InputError
from amdtop.model import EngineStats, WorkerState, WorkerStatus
from amdtop.telemetry.sim import GIB, GpuDemand, SimBackend


@dataclass(frozen=True, slots=True)
class DemoSpec:
    name: str
    gpus: tuple[int, ...]
    port: int
    util: tuple[float, ...]
    """Per-rank demand 0..1 (uneven values make an imbalanced group)."""
    vram_gib: tuple[float, ...]
    cpus: tuple[int, ...] = ()
    mems: tuple[int, ...] = ()
    numa_node: int | None = None


def default_specs(sim: SimBackend) -> list[DemoSpec]:
    """Two TP-4 workers pinned to their GPUs' nodes (8 GPUs), one TP-2 (fewer GPUs), none on an empty node."""
    topo = sim.topology()
    n = len(topo.gpus)
    nodes = {node.id: node.cpus for node in topo.numa_nodes}
    if n >= 8:
        return [
            DemoSpec(
                "llama-70b", (0, 1, 2, 3), 18200, (0.82, 0.80, 0.81, 0.79), (171, 171, 171, 171), nodes[0], (0,), 0
            ),
            DemoSpec(
                "qwen-32b", (4, 5, 6, 7), 18201, (0.55, 0.57, 0.54, 0.56), (150, 150, 150, 150), nodes[1], (1,), 1
            ),
        ]
    if n >= 2:
        node = topo.gpus[0].numa_node or 0
        return [DemoSpec("mistral-7b", (0, 1), 18200, (0.6, 0.58), (40, 40), nodes.get(node, ()), (node,), node)]
    return []


class DemoWorkers:
    """Worker source and controller over :class:`DemoSpec` values."""

    def __init__(self, sim: SimBackend, specs: list[DemoSpec] | None = None, clock: Callable[[], float] | None = None):
        self.sim = sim
        self.specs = {s.name: s for s in (default_specs(sim) if specs is None else specs)}
        self._clock = clock or (lambda: 0.0)
        self._lock = threading.Lock()
        start = self._clock()
        self._state = {
            name: WorkerStatus(name, WorkerState.STOPPED, s.gpus, port=s.port) for name, s in self.specs.items()
        }
        for name in self.specs:
            self._run(name, start)

    def _run(self, name: str, now: float, restarts: int = 0) -> WorkerStatus:
        s = self.specs[name]
        self.sim.set_demand(name, {g: GpuDemand(s.util[r], int(s.vram_gib[r] * GIB)) for r, g in enumerate(s.gpus)})
        run = sum(s.util) * 40
        status = WorkerStatus(
            name,
            WorkerState.READY,
            s.gpus,
            port=s.port,
            numa_node=s.numa_node,
            url=f"http://127.0.0.1:{s.port}",
            cpu_affinity=s.cpus,
            mems_allowed=s.mems,
            restarts=restarts,
            started_at=now - 3725.0,
            source="demo",
            engine=EngineStats(running=round(run), waiting=0, kv_cache_usage=0.42, gen_tokens_per_s=round(run * 31.0)),
        )
        self._state[name] = status
        return status

    def _get(self, name: str) -> WorkerStatus:
        if name not in self._state:
            raise InputError(f"worker: no profile named {name!r}; choose one of {', '.join(self._state)}")
        return self._state[name]

    def names(self) -> list[str]:
        return list(self._state)

    def status(self) -> list[WorkerStatus]:
        with self._lock:
            return list(self._state.values())

    def launch(self, name: str) -> WorkerStatus:
        with self._lock:
            current = self._get(name)
            return self._run(name, self._clock(), current.restarts)

    def stop(self, name: str) -> str:
        with self._lock:
            self._get(name)
            self.sim.set_demand(name, {})
            s = self.specs[name]
            self._state[name] = WorkerStatus(name, WorkerState.STOPPED, s.gpus, port=s.port, source="demo")
            return f"stopped {name}"

    def restart(self, name: str) -> WorkerStatus:
        with self._lock:
            current = self._get(name)
            return self._run(name, self._clock(), current.restarts + 1)

    def retune_diff(self, name: str, changes: Mapping[str, str]) -> str:
        self._get(name)
        return "\n".join(f"[worker.args] {k}: (profile) -> {v}" for k, v in changes.items())

    def retune(self, name: str, changes: Mapping[str, str]) -> WorkerStatus:
        with self._lock:
            current = self._get(name)
            status = self._run(name, self._clock(), current.restarts + 1)
            self._state[name] = replace(status)
            return status
