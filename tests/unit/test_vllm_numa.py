"""vLLM's own --numa-bind: no numactl from amdtop on top of it, and the NUMA check reads the ranks vLLM bound."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from amdtop.analysis.numa import numa_flags
from amdtop.model import FlagKind, GpuInfo, NumaNode, Topology, WorkerState, WorkerStatus
from amdtop.procinfo import read_binding, read_cmdline
from amdtop.supervisor.launchspec import build_argv
from amdtop.supervisor.profiles import parse_document, profiles_from_document, resolve_numa
from amdtop.telemetry.sim import SimBackend
from amdtop.vllm_numa import uses_vllm_numa_binding, vllm_bound_view


@pytest.mark.parametrize(
    ("args", "on"),
    [
        (["vllm", "serve", "/m", "--numa-bind"], True),
        (["vllm", "serve", "/m", "--numa-bind", "--numa-bind-nodes", "0", "1"], True),
        (["vllm", "serve", "/m", "--numa-bind", "--no-numa-bind"], False),
        (["vllm", "serve", "/m", "--numa-bind-nodes", "0"], False),  # vLLM refuses nodes without --numa-bind
        (["vllm", "serve", "/m"], False),
        ({"numa-bind": True, "max-num-seqs": 8}, True),
        ({"numa_bind": "false"}, False),
        ((("numa-bind", True), ("no-numa-bind", True)), False),
        ((("max-num-seqs", 8),), False),
    ],
)  # fmt: skip
def test_predicate(args: object, on: bool) -> None:
    assert uses_vllm_numa_binding(args) is on  # type: ignore[arg-type]


def _profile(extra: str) -> object:
    text = f'[[worker]]\nname = "a"\nmodel = "/m"\ngpus = [0, 4]\nport = 8000\nnuma_node = "auto"\n[worker.args]\n{extra}'
    return profiles_from_document(parse_document(text))[0]


def test_no_outer_numactl_and_no_span_error_with_numa_bind() -> None:
    topo = SimBackend().topology()
    spans = {topo.gpu(0).numa_node, topo.gpu(4).numa_node}  # type: ignore[union-attr]
    assert len(spans) == 2, "the simulated node puts GPUs 0 and 4 on different sockets"
    plain = _profile("max-num-seqs = 8\n")
    with pytest.raises(Exception, match="span NUMA nodes"):
        resolve_numa(plain, topo)  # type: ignore[arg-type]
    bound = _profile("numa-bind = true\n")
    assert resolve_numa(bound, topo) is None  # type: ignore[arg-type]
    argv = build_argv(bound, 0)  # type: ignore[arg-type]
    assert "numactl" not in argv and "--numa-bind" in argv
    assert build_argv(plain, 0)[:1] == ["numactl"]  # type: ignore[arg-type]


@contextmanager
def _procs(api_args: list[str]) -> Iterator[tuple[int, int]]:
    # A real unbound "API server" and a real EngineCore-titled process bound by real numactl to CPU 0 / node 0.
    api = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "serve", "/m", *api_args])
    core = subprocess.Popen(["numactl", "--physcpubind=0", "--membind=0", "bash", "-c",
                             "exec -a VLLM::EngineCore sleep 60"])  # fmt: skip
    try:
        deadline = time.monotonic() + 10
        # One read per look: the cmdline is empty for a moment while bash execs (two reads raced under load).
        while not (argv := read_cmdline(core.pid)) or not argv[0].startswith("VLLM::"):
            assert time.monotonic() < deadline
            time.sleep(0.02)
        yield api.pid, core.pid
    finally:
        for p in (api, core):
            p.kill()
            p.wait()


TOPO = Topology(
    gpus=(GpuInfo(0, "gpu0", "0000:01:00.0", 0),),
    links=(),
    numa_nodes=(NumaNode(0, (0,)), NumaNode(1, (1,))),
)
"""Two one-CPU nodes over this box's CPUs 0 and 1; the GPU sits on node 0."""


def _worker(api: int, core: int) -> WorkerStatus:
    return WorkerStatus(name="w", state=WorkerState.READY, gpus=(0,), pid=api, pids=(api, core))


@pytest.mark.skipif(len(__import__("os").sched_getaffinity(0)) < 2, reason="needs CPUs 0 and 1")
def test_numa_check_reads_the_ranks_vllm_bound() -> None:
    with _procs(["--numa-bind"]) as (api, core):
        w = _worker(api, core)
        api_binding = read_binding(api)
        assert api_binding is not None and 1 in api_binding.cpus  # the API server vLLM leaves free (node 1's CPU)
        view = vllm_bound_view(w)
        assert view.pids == (core,) and view.pid is None
        assert [f for f in numa_flags(TOPO, [view]) if f.kind is FlagKind.NUMA_MISMATCH] == []
    with _procs([]) as (api, core):
        # Without --numa-bind amdtop's own pinning is checked as before: the free API server is a real mismatch.
        w = _worker(api, core)
        assert vllm_bound_view(w) is w
        raw = [f for f in numa_flags(TOPO, [w]) if f.kind is FlagKind.NUMA_MISMATCH]
        assert raw and "runs on CPUs 1 off node 0" in raw[0].message
