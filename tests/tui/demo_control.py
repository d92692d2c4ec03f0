"""A deterministic stand-in for the demo's supervisor in Pilot and snapshot tests.

It answers from the demo profiles the real ``amdtop --demo`` writes (``amdtop.supervisor.demo``: same workers, GPUs,
ports and capacities), reports them READY with the engine numbers the simulated server's background load would give
at the frozen clock, and feeds the simulated GPUs through the same ``feed_demand`` the demo uses. No process starts,
so the picture is the same on every machine. Scenarios that need a known imbalance or a wrong binding are given as
:class:`Scenario` workers instead.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import tomlkit

from amdtop.errors import InputError
from amdtop.hip_devices import device_bdf
from amdtop.layout import WorkerLayout
from amdtop.model import EngineSample, EngineStats, WorkerState, WorkerStatus
from amdtop.simserver.background import OUTPUT_TOKENS, PROMPT_TOKENS, target
from amdtop.simserver.engine import SimConfig
from amdtop.simserver.logs import rccl_init_lines
from amdtop.supervisor.demo import demo_profiles_text, feed_demand
from amdtop.supervisor.observe import profile_numa
from amdtop.supervisor.profiles import Profile, profiles_from_document
from amdtop.supervisor.retune import retune_words
from amdtop.telemetry.sim import GIB, GpuDemand, SimBackend

DEMO_PORT_BASE = 18080  # the Supervisor's default for the demo
UPTIME_S = 3725.0
KV_TOKENS = SimConfig().kv_cache_tokens


@dataclass(frozen=True, slots=True)
class Scenario:
    """A worker with a fixed per-rank load, for tests that need a known imbalance or a wrong binding."""

    name: str
    gpus: tuple[int, ...]
    port: int
    util: tuple[float, ...]
    vram_gib: tuple[float, ...]
    cpus: tuple[int, ...] = ()
    mems: tuple[int, ...] = ()
    numa_node: int | None = None
    layout: WorkerLayout | None = None


def _num(profile: Profile, key: str, default: float) -> float:
    value = profile.arg(key)
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else default


class DemoControl:
    """Worker source and controller over the demo profiles (or the given scenarios); records every control call."""

    def __init__(
        self,
        sim: SimBackend,
        scenarios: Sequence[Scenario] | None = None,
        clock: Callable[[], float] | None = None,
        log_dir: Path | None = None,
        pid_base: int | None = None,
        layout: str = "default",
    ) -> None:
        self.sim = sim
        self.pid_base = pid_base
        """Give worker i the API-server pid ``pid_base + i`` (none by default: no process table to match)."""
        self.log_dir = log_dir
        self.topology = sim.topology()
        self.clock = clock or (lambda: 0.0)
        self.scenarios = {s.name: s for s in scenarios} if scenarios is not None else None
        doc = tomlkit.parse(demo_profiles_text(self.topology, DEMO_PORT_BASE, layout))
        self.profiles = [] if self.scenarios is not None else profiles_from_document(doc, "demo")
        self.calls: list[tuple[str, ...]] = []
        self._lock = threading.Lock()
        self._state: dict[str, WorkerStatus] = {}
        for name in self.names():
            self._run(name, self.clock() - UPTIME_S, 0)
        if log_dir is not None:
            self._write_logs(log_dir)

    def _write_logs(self, log_dir: Path) -> None:
        """Each demo worker's log as the simulated server writes it with its profile's env (RCCL init included)."""
        for i, p in enumerate(self.profiles):
            env = dict(p.env)
            if env.get("NCCL_DEBUG", "").upper() != "INFO":
                continue
            # Profiles name HIP devices (partitions on a partitioned node), as the simulated server maps them.
            bdfs = [b for h in p.gpus if (b := device_bdf(self.topology, h)) is not None]
            lines = rccl_init_lines(
                len(p.gpus), 4000 + 100 * i, bdfs=bdfs, p2p=env.get("NCCL_P2P_DISABLE") != "1", host="amdtop-demo"
            )
            path = log_dir / f"{p.name}.log"
            path.write_text("".join(line + "\n" for line in lines))
            self._state[p.name] = replace(self._state[p.name], log=str(path))

    def names(self) -> list[str]:
        return list(self.scenarios) if self.scenarios is not None else [p.name for p in self.profiles]

    def demo_load(self) -> Callable[[Sequence[WorkerStatus]], None]:
        """What the pipeline calls each tick, as with the real demo's supervisor."""

        def feed(statuses: Sequence[WorkerStatus]) -> None:
            if self.scenarios is None:
                feed_demand(self.sim, self.profiles, statuses, self.topology)

        return feed

    def _run(self, name: str, started: float, restarts: int) -> WorkerStatus:
        if self.scenarios is not None:
            s = self.scenarios[name]
            self.sim.set_demand(name, {g: GpuDemand(s.util[r], int(s.vram_gib[r] * GIB)) for r, g in enumerate(s.gpus)})
            running = sum(s.util) * 40
            status = WorkerStatus(
                name, WorkerState.READY, s.gpus, port=s.port, numa_node=s.numa_node, url=f"http://127.0.0.1:{s.port}",
                cpu_affinity=s.cpus, mems_allowed=s.mems, restarts=restarts, started_at=started, source="amdtop",
                layout=s.layout,
                engine=EngineStats(running=round(running), waiting=0, kv_cache_usage=0.42,
                                   gen_tokens_per_s=round(running * 31.0)),
                simulated=True,
            )  # fmt: skip
        else:
            p = next(p for p in self.profiles if p.name == name)
            capacity = _num(p, "capacity", 64)
            running = float(min(capacity, target(int(_num(p, "background-load", 0)), 40.0, self.clock() - started)))
            numa = profile_numa(p, self.topology)
            cpus = next((n.cpus for n in self.topology.numa_nodes if n.id == numa), ())
            engines = _engines(p, running)
            status = WorkerStatus(
                name, WorkerState.READY, p.gpus, port=p.port, numa_node=numa, url=p.url,
                cpu_affinity=tuple(cpus), mems_allowed=() if numa is None else (numa,), restarts=restarts,
                started_at=started, source="amdtop",
                # The simulated server's KV use: each synthetic sequence holds its prompt and half its output.
                engine=EngineStats(running=running, waiting=0.0,
                                   kv_cache_usage=running * (PROMPT_TOKENS + OUTPUT_TOKENS / 2) / KV_TOKENS,
                                   gen_tokens_per_s=round(running * _num(p, "tokens-per-s", 30.0)),
                                   engines=engines, sleep_level=0 if engines else None, kind=p.engine),
                simulated=True, layout=p.layout if not p.layout.is_plain else None, engine_kind=p.engine,
            )  # fmt: skip
        if self.pid_base is not None:
            status = replace(status, pid=self.pid_base + self.names().index(name))
        self._state[name] = status
        return status

    def _get(self, name: str) -> WorkerStatus:
        if name not in self._state:
            raise InputError(f"worker[{name}]: no such worker; use one of: {', '.join(self._state)}")
        return self._state[name]

    def status(self) -> list[WorkerStatus]:
        with self._lock:
            return list(self._state.values())

    def launch(self, name: str, force: bool = False) -> WorkerStatus:
        self.calls.append(("launch", name))
        with self._lock:
            return self._run(name, self.clock(), self._get(name).restarts)

    def stop(self, name: str, grace: float | None = None) -> str:
        self.calls.append(("stop", name))
        with self._lock:
            current = self._get(name)
            self.sim.set_demand(name, {})
            self._state[name] = WorkerStatus(name, WorkerState.STOPPED, current.gpus, port=current.port)
            return f"stopped {name}"

    def restart(self, name: str, grace: float | None = None, force: bool = False) -> WorkerStatus:
        self.calls.append(("restart", name))
        with self._lock:
            return self._run(name, self.clock(), self._get(name).restarts + 1)

    def profile(self, name: str) -> Profile:
        """The demo profile ``name`` (the retune dialog starts from it)."""
        for p in self.profiles:
            if p.name == name:
                return p
        raise InputError(f"worker[{name}]: no such worker")

    def api_key(self, name: str) -> str | None:
        """The demo profiles carry no key."""
        return None

    def profile_words(self, name: str) -> tuple[str, ...]:
        """The retune dialog's words of ``name`` (secrets masked), as the node service gives them."""
        return retune_words(self.profile(name))

    def retune_diff(self, name: str, changes: Mapping[str, str]) -> str:
        self._get(name)
        return "\n".join(f"[worker.args] {k}: (profile) -> {v}" for k, v in changes.items())

    def retune(
        self, name: str, changes: Mapping[str, str], grace: float | None = None, force: bool = False
    ) -> WorkerStatus:
        self.calls.append(("retune", name, *(f"{k}={v}" for k, v in sorted(changes.items()))))
        with self._lock:
            return self._run(name, self.clock(), self._get(name).restarts + 1)

    def sleep(self, name: str, *, wake: bool = False, level: int = 1) -> str:
        """As ``Supervisor.sleep``: the worker turns ``asleep`` (its engines at ``level``) or awake again."""
        self.calls.append(("wake",) if wake else ("sleep", name, str(level)))
        with self._lock:
            st = self._get(name)
            if wake:
                self._run(name, st.started_at or self.clock(), st.restarts)
                return '{"status":"awake"}'
            engine = st.engine or EngineStats()
            asleep = replace(engine, running=0.0, kv_cache_usage=0.0, gen_tokens_per_s=0.0, sleep_level=level,
                             engines=tuple(replace(e, running=0.0, kv_cache_usage=0.0, gen_tokens_per_s=0.0,
                                                   sleep_level=level) for e in engine.engines))  # fmt: skip
            self._state[name] = replace(st, state=WorkerState.ASLEEP, engine=asleep)
            return f'{{"status":"sleeping","level":{level}}}'

    def close(self) -> None:
        pass


def _engines(p: Profile, running: float) -> tuple[EngineSample, ...]:
    """Per-engine numbers of a data-parallel demo worker: replicas load-balanced, the first a little busier."""
    dp = p.layout.dp
    if dp < 2:
        return ()
    shares = [(dp + 1 - i) / sum(dp + 1 - j for j in range(dp)) for i in range(dp)]
    out = []
    for i, share in enumerate(shares):
        run = round(running * share)
        kv = run * (PROMPT_TOKENS + OUTPUT_TOKENS / 2) / KV_TOKENS
        out.append(EngineSample(str(i), float(run), 0.0, kv, float(round(run * _num(p, "tokens-per-s", 30.0))), 0))
    return tuple(out)
