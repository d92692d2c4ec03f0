"""Real vLLM on the CPU, driven through the Supervisor (recipe: shared/reference/vllm.md section 11).

``vllm_tp1`` is one session-wide READY TP=1 worker that every e2e test may reuse (each vLLM start costs ~30-45 s of
both cores). Skipped only when ``.venv-vllm`` is missing and ``AMDTOP_E2E_REQUIRED`` is unset; ``run-tests`` sets it,
so CI fails instead of silently skipping.

A vLLM start is mostly one process importing and initialising on one core: the TP=1-engine servers that later modules
need (the DP=2 one, the small-KV one) are launched beside ``vllm_tp1`` when the session holds their tests
(:class:`EarlyStarts`), so three starts take about the time of two. They idle until their module takes them (an idle
vLLM 0.32 waits on a socket, it does not spin), and each is stopped when its module ends, before the timing tests
that follow. The TP=2 servers start alone: their ranks poll while they start.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from amdtop.model import WorkerState
from amdtop.procinfo import read_environ, thread_ids
from amdtop.supervisor import Supervisor
from amdtop.supervisor.procs import scan
from amdtop.telemetry.sim import SimBackend
from tests.gates import PASS

REPO = Path(__file__).resolve().parents[2]
VLLM_VENV = REPO / ".venv-vllm"
VLLM_BIN = VLLM_VENV / "bin" / "vllm"
TINY_MODEL = REPO / ".cache" / "tiny-llama"
# Private compile cache under .cache: torch.compile artefacts persist between runs (warm start ~30 s instead of ~45 s).
VLLM_CACHE_ROOT = REPO / ".cache" / "vllm-cache"
SERVED_NAME = "tiny-llama"
TP1_PORT = 18010
READY_TIMEOUT_S = 300.0


def require_vllm() -> None:
    """Skip (or fail under AMDTOP_E2E_REQUIRED) when the CPU vLLM install or the tiny model is missing."""
    missing = [str(p) for p in (VLLM_BIN, TINY_MODEL / "model.safetensors") if not p.exists()]
    if not missing:
        return
    why = f"real vLLM not installed ({', '.join(missing)} missing); run scripts/setup-vllm.sh"
    if os.environ.get("AMDTOP_E2E_REQUIRED"):
        pytest.fail(why)
    pytest.skip(why)


def profile_toml(name: str, port: int, *, tp: int = 1, max_num_seqs: int = 8, eager: bool = False) -> str:
    """A CPU vLLM worker profile: pinned to NUMA node 0 with real numactl, no GPUs. ``eager``: ``--enforce-eager``
    (no torch.compile pass: a fresh clone has no compile cache)."""
    env = {
        "HF_HUB_OFFLINE": "1",
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "VLLM_CACHE_ROOT": str(VLLM_CACHE_ROOT),
        "VLLM_WORKER_MULTIPROC_METHOD": "spawn",
    }
    # One core per rank. TP=1 runs wholly on core 1 (API server and EngineCore too, through taskset inside numactl's
    # node binding) so core 0 belongs to the load generator. Left free to roam, EngineCore, which busy-polls its
    # worker, lands on the client's core now and then, and the client then gets the CPU only when the request has
    # finished: every chunk arrives at once, TTFT ~= E2EL (~90 ms against the server's own 5 ms), in "modes" that last
    # as long as the scheduler leaves EngineCore there (docs/benchmarks.md, "TTFT modes").
    env["VLLM_CPU_OMP_THREADS_BIND"] = "1" if tp == 1 else "|".join(str(i) for i in range(tp))
    env_lines = "".join(f'{k} = "{v}"\n' for k, v in env.items())
    command = f'["taskset", "-c", "1", "{VLLM_BIN}", "serve"]' if tp == 1 else f'["{VLLM_BIN}", "serve"]'
    eager_line = "enforce-eager = true\n" if eager else ""
    return (
        f'# e2e worker {name}\n[[worker]]\nname = "{name}"\nmodel = "{TINY_MODEL}"\ngpus = []\n'
        f"numa_node = 0  # this box has one NUMA node\nport = {port}\n"
        f"command = {command}\nstop_grace_s = 30\n"
        f'[worker.args]\n{eager_line}tensor-parallel-size = {tp}\nmax-model-len = 4096\ndtype = "float32"\n'
        f'served-model-name = "{SERVED_NAME}"\nmax-num-seqs = {max_num_seqs}\nno-enable-prefix-caching = true\n'
        f"[worker.env]\n{env_lines}"
    )


def tp1_profile(port: int) -> str:
    """The session's TP=1 worker (compiled: the side-by-side with ``vllm bench serve`` measures its speed; eager, its
    C=1 throughput ratio sat at 0.92 against the 0.90 floor)."""
    return profile_toml("tp1", port)


def renice(pids: Iterable[int], value: int) -> None:
    """Every thread of ``pids`` to nice ``value`` (Linux's nice is per thread; a rank's threads exist once it is up)."""
    for tid in (tid for pid in pids for tid in thread_ids(pid)):
        try:
            os.setpriority(os.PRIO_PROCESS, tid, value)
        except OSError:  # gone, or (not root) no CAP_SYS_NICE to lower it again
            pass


def e2e_supervisor(root: Path) -> Supervisor:
    """The supervisor of the worker whose profile is ``root``/workers.toml and whose state is ``root``/state."""
    return Supervisor(
        root / "workers.toml", root / "state", gate=PASS, topology=SimBackend().topology(), vendor="AMD", grace_s=30.0
    )


def marked_pids(prefix: str) -> list[int]:
    """Live processes whose AMDTOP_WORKER marker starts with ``prefix`` (``name:`` or ``name:launch``)."""
    return [pid for pid in scan() if read_environ(pid).get("AMDTOP_WORKER", "").startswith(prefix)]


@dataclass
class VllmWorker:
    """A READY worker launched through the Supervisor."""

    url: str
    model: str
    supervisor: Supervisor
    name: str
    state_dir: Path
    config: Path
    ready_s: float
    """Seconds from launch to /health 200."""


@dataclass
class Launched:
    """A worker launched (not yet READY) under its own supervisor and state directory."""

    name: str
    supervisor: Supervisor
    root: Path
    config: Path
    t0: float


class EarlyStarts:
    """Servers launched ahead of the module that uses them (see the module's docstring)."""

    def __init__(self, factory: pytest.TempPathFactory) -> None:
        self._factory = factory
        self._waiting: dict[str, Launched] = {}

    def launch(self, name: str, profile: str) -> Launched:
        require_vllm()
        VLLM_CACHE_ROOT.mkdir(parents=True, exist_ok=True)
        adopted = self._prestarted(name, profile)
        if adopted is not None:
            return adopted
        root = self._factory.mktemp(f"vllm-{name}")
        config = root / "workers.toml"
        config.write_text(profile)
        sup = e2e_supervisor(root)
        t0 = time.monotonic()
        sup.launch(name)
        return Launched(name, sup, root, config, t0)

    @staticmethod
    def _prestarted(name: str, profile: str) -> Launched | None:
        """The server run-tests launched ahead of this session (tests/e2e/prestart.py), when its profile is this one
        and it is starting or up; ``None`` otherwise (then the session launches its own)."""
        top = os.environ.get("AMDTOP_E2E_PRESTARTED")
        if not top:
            return None
        root = Path(top) / name
        config = root / "workers.toml"
        if not config.exists() or config.read_text() != profile:
            return None
        sup = e2e_supervisor(root)
        if sup.status_one(name).state not in (WorkerState.STARTING, WorkerState.READY):
            sup.close()
            return None
        print(f"\nE2E {name}: adopted the server run-tests started ({root})")
        return Launched(name, sup, root, config, time.monotonic())

    def launch_early(self, name: str, profile: str) -> None:
        if name not in self._waiting:
            self._waiting[name] = self.launch(name, profile)
            print(f"\nE2E {name}: launched early")

    def take(self, name: str, profile: str) -> Launched:
        """The early-launched ``name`` (its supervisor now the caller's to stop), else one launched now."""
        return self._waiting.pop(name, None) or self.launch(name, profile)

    def close(self) -> None:
        for name, w in self._waiting.items():  # launched early, never taken (its tests were deselected or failed)
            w.supervisor.stop(name)
            w.supervisor.close()
        self._waiting.clear()


@pytest.fixture(scope="session")
def early_starts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EarlyStarts]:
    starts = EarlyStarts(tmp_path_factory)
    try:
        yield starts
    finally:
        starts.close()


EARLY: dict[str, tuple[str, Callable[[], str]]] = {}
"""Fixture name -> (worker name, its profile): the servers ``vllm_tp1`` launches beside itself (filled by the modules
that own them)."""


@pytest.fixture(scope="session")
def vllm_tp1(early_starts: EarlyStarts, request: pytest.FixtureRequest) -> Iterator[VllmWorker]:
    """One READY TP=1 vLLM worker (real numactl pinning) for the whole session; stopped and swept at the end."""
    launched = early_starts.launch("tp1", tp1_profile(TP1_PORT))
    sup, root, config, t0 = launched.supervisor, launched.root, launched.config, launched.t0
    wanted = {f for item in request.session.items for f in getattr(item, "fixturenames", ())}
    for fixture, (name, profile) in EARLY.items():
        if fixture in wanted:
            early_starts.launch_early(name, profile())
    try:
        st = sup.wait_ready("tp1", timeout=READY_TIMEOUT_S)
        ready_s = time.monotonic() - t0
        print(f"\nE2E tp1: launch->ready {ready_s:.1f} s")
        yield VllmWorker(st.url or "", SERVED_NAME, sup, "tp1", root / "state", config, ready_s)
    finally:
        report = sup.stop("tp1")
        sup.close()
        print(f"\nE2E tp1: {report.message}; shm removed {list(report.swept_shm)}")
        left = marked_pids("tp1:")
        assert not left, f"tp1 left processes behind: {left} ({report.message})"
