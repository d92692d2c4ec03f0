"""Process lists on their own cadence (issue 34): the NVML backend reads the running processes and their
utilisation every ``processes_every_s``, repeating the same list between readings; a control action asks for a
reading at once; the pipeline's process rows repeat (the same tuple) while nothing in them changed, and say when
they were read."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from amdtop.gpuprocs import HostInfo, ProcessTable
from amdtop.model import GpuProcess, GpuSample, NodeSnapshot, Topology
from amdtop.pipeline import NodePipeline
from amdtop.telemetry.base import BackendOptions
from amdtop.telemetry.nvml import NvmlBackend
from amdtop.telemetry.nvml_replay import ReplayNvml, load_fixture, materialize

PROCS_REPLAY = Path(__file__).resolve().parents[1] / "fixtures" / "nvml" / "h200_procs_replay.json"


def _backend(tmp_path: Path, every: float) -> tuple[NvmlBackend, ReplayNvml]:
    fixture = load_fixture(PROCS_REPLAY)
    sysfs, proc = materialize(fixture, tmp_path)
    nvml = ReplayNvml(fixture)
    calls = {"n": 0}
    real = nvml.nvmlDeviceGetProcessUtilization

    def counted(*args: Any) -> Any:
        calls["n"] += 1
        return real(*args)

    nvml.nvmlDeviceGetProcessUtilization = counted  # type: ignore[method-assign]
    nvml.calls = calls  # type: ignore[attr-defined]
    options = BackendOptions(sysfs_root=sysfs, proc_root=proc, processes_every_s=every)
    return NvmlBackend(nvml, options), nvml


def test_nvml_reads_processes_on_their_cadence_and_repeats_the_same_list(tmp_path: Path) -> None:
    backend, nvml = _backend(tmp_path, every=3600.0)
    first = backend.sample()
    assert first.gpus[0].processes and first.processes_at is not None
    assert nvml.calls["n"] == 1  # type: ignore[attr-defined]
    second = backend.sample()
    # Not read again: the same tuple, the same reading time, no per-process call.
    assert second.gpus[0].processes is first.gpus[0].processes
    assert second.processes_at == first.processes_at
    assert nvml.calls["n"] == 1  # type: ignore[attr-defined]
    backend.request_processes()  # a launch or a stop
    backend.sample()
    assert nvml.calls["n"] == 2  # type: ignore[attr-defined]


def test_nvml_without_a_cadence_reads_every_poll_and_names_no_reading_time(tmp_path: Path) -> None:
    backend, nvml = _backend(tmp_path, every=0.0)
    snaps = [backend.sample() for _ in range(3)]
    assert nvml.calls["n"] == 3  # type: ignore[attr-defined]
    assert all(s.processes_at is None for s in snaps)


def test_pipeline_request_workers_asks_the_backend_for_processes(tmp_path: Path) -> None:
    backend, nvml = _backend(tmp_path, every=3600.0)
    pipeline = NodePipeline(backend, discover=False, proc_root=tmp_path, processes_every_s=3600.0)
    pipeline.tick()
    pipeline.tick()
    assert nvml.calls["n"] == 1  # type: ignore[attr-defined]
    pipeline.request_workers()
    pipeline.tick()
    assert nvml.calls["n"] == 2  # type: ignore[attr-defined]
    pipeline.close()


class Host:
    def __init__(self) -> None:
        self.reads = 0

    def read(self, pids: Any) -> dict[int, HostInfo]:
        self.reads += 1
        return {pid: HostInfo(pid, user="u", uid=1, cpu_pct=float(self.reads), started_at=100.0) for pid in pids}


def _snap(t: float, procs: tuple[GpuProcess, ...], at: float | None) -> NodeSnapshot:
    return NodeSnapshot("nvml", "h", t, Topology((), (), ()), (GpuSample(0, processes=procs),), processes_at=at)


def test_process_rows_repeat_while_unchanged_and_take_elapsed_at_the_reading() -> None:
    now = [0.0]
    host = Host()
    table = ProcessTable(host, every_s=3.0, clock=lambda: now[0])
    procs = (GpuProcess(10, "python3", 1 << 30),)
    rows1, totals1 = table.rows(_snap(1000.0, procs, 1000.0), [])
    now[0] = 1.0
    rows2, totals2 = table.rows(_snap(1001.0, procs, 1000.0), [])
    assert rows2 is rows1 and totals2 is totals1 and host.reads == 1
    assert rows2[0].elapsed_s == 900.0  # at the reading (1000 - 100), not at the tick
    now[0] = 2.0  # the backend read again: host facts too
    rows3, _ = table.rows(_snap(1002.0, procs, 1002.0), [])
    assert host.reads == 2 and rows3 is not rows1 and rows3[0].cpu_pct == 2.0
    now[0] = 2.5  # a new pid: read at once
    table.rows(_snap(1002.5, (*procs, replace(procs[0], pid=11)), 1002.0), [])
    assert host.reads == 3


def test_process_rows_without_a_cadence_read_the_host_every_tick() -> None:
    host = Host()
    table = ProcessTable(host)
    procs = (GpuProcess(10, "python3", 1 << 30),)
    for t in (1.0, 2.0, 3.0):
        table.rows(_snap(t, procs, None), [])
    assert host.reads == 3


def test_discovery_walks_the_gpu_process_trees_when_they_change_or_on_the_cadence(tmp_path: Path) -> None:
    from amdtop.analysis import VllmDiscovery

    now = [0.0]
    discovery = VllmDiscovery(tmp_path, full_every_s=1000.0, clock=lambda: now[0], trees_every_s=3.0)
    discovery.find({10: (0,)})  # the first call: the full walk
    assert (discovery.full_walks, discovery.tree_walks) == (1, 0)
    now[0] = 1.0
    discovery.find({10: (0,)})
    assert discovery.tree_walks == 0  # the same GPU processes, 1 s later: nothing read
    now[0] = 1.5
    discovery.find({10: (0,), 11: (0,)})
    assert discovery.tree_walks == 1  # a new GPU process: walked at once
    now[0] = 5.0
    discovery.find({10: (0,), 11: (0,)})
    assert discovery.tree_walks == 2  # the cadence


def test_discovery_without_a_cadence_walks_every_call(tmp_path: Path) -> None:
    from amdtop.analysis import VllmDiscovery

    discovery = VllmDiscovery(tmp_path, full_every_s=1000.0, clock=lambda: 0.0)
    for _ in range(3):
        discovery.find({10: (0,)})
    assert (discovery.full_walks, discovery.tree_walks) == (1, 2)


def test_sysfs_reads_the_kfd_process_list_on_its_cadence(tmp_path: Path) -> None:
    import shutil

    from amdtop.telemetry.sysfs import SysfsBackend
    from tests.fixtures.sysfs_tree import build_mi300x_8

    tree = build_mi300x_8(tmp_path)
    backend = SysfsBackend(tree.root, tree.proc_root, clock=lambda: 1.0, hostname="f", processes_every_s=3600.0)
    first = backend.sample()
    assert {p.pid for p in first.gpus[0].processes} == {4242} and first.processes_at == 1.0
    kfd = tree.root / "class" / "kfd" / "kfd" / "proc" / "4242"
    shutil.rmtree(kfd)  # the process exits
    second = backend.sample()
    assert second.gpus[0].processes is first.gpus[0].processes  # not read again yet
    backend.request_processes()
    assert backend.sample().gpus[0].processes == ()
    every_poll = SysfsBackend(tree.root, tree.proc_root, clock=lambda: 1.0, hostname="f")
    assert every_poll.sample().processes_at is None


def test_amdsmi_reads_the_process_lists_on_their_cadence(tmp_path: Path, monkeypatch: Any, smi: Any) -> None:
    import shutil

    from amdtop.telemetry.amdsmi_backend import AmdsmiBackend
    from tests.fixtures.sysfs_tree import build_mi300x_8

    tree = build_mi300x_8(tmp_path)
    monkeypatch.setenv("AMDTOP_FAKE_AMDSMI_SYSFS", str(tree.root))
    monkeypatch.setenv("AMDTOP_FAKE_AMDSMI_PROC", str(tree.proc_root))
    backend = AmdsmiBackend(smi, tree.root, clock=lambda: 1.0, hostname="f", processes_every_s=3600.0)
    first = backend.sample()
    assert {p.pid for p in first.gpus[0].processes} == {4242} and first.processes_at == 1.0
    shutil.rmtree(tree.root / "class" / "kfd" / "kfd" / "proc" / "4242")  # the process exits
    assert backend.sample().gpus[0].processes is first.gpus[0].processes  # not read again yet
    backend.request_processes()
    assert backend.sample().gpus[0].processes == ()


def test_the_launch_gate_judges_process_lists_read_for_it(tmp_path: Path) -> None:
    """A worker stopped a moment ago must not still hold its GPU in the frame the gate judges: the gate's tick reads
    the process lists whatever their cadence."""
    from amdtop.runtime.gate import frame_gate
    from amdtop.runtime.loop import NodeRuntime
    from amdtop.runtime.spec import NodeSpec

    backend, nvml = _backend(tmp_path, every=3600.0)
    pipeline = NodePipeline(backend, discover=False, proc_root=tmp_path, processes_every_s=3600.0)
    runtime = NodeRuntime(pipeline, 1.0)
    runtime.tick()
    assert nvml.calls["n"] == 1  # type: ignore[attr-defined]
    gate = frame_gate(lambda: runtime, backend.topology(), NodeSpec(config=tmp_path / "c.toml", state_dir=tmp_path))
    gate.sample()
    assert nvml.calls["n"] == 2  # type: ignore[attr-defined]
    pipeline.close()


def test_the_cadence_every_backend_shares(monkeypatch: Any) -> None:
    # One clock for NVML, sysfs and amdsmi: due at the first poll, then only once the interval passed or a reading
    # was asked for (from another thread: a launch); the reading's wall time only where the cadence is slower than
    # the poll.
    import threading

    import amdtop.telemetry.base as base

    mono = [100.0]
    monkeypatch.setattr(base.time, "monotonic", lambda: mono[0])
    cadence = base.ProcessCadence(3.0, wall=lambda: 1_700_000_000.0 + mono[0])
    assert cadence.read_at is None
    assert cadence.due() and cadence.read_at == 1_700_000_100.0
    mono[0] += 2.9
    assert not cadence.due() and cadence.read_at == 1_700_000_100.0  # the last reading's time stays
    asker = threading.Thread(target=cadence.request)
    asker.start()
    asker.join()
    assert cadence.due() and cadence.read_at == 1_700_000_102.9
    assert not cadence.due()  # the request is spent
    mono[0] += 3.0
    assert cadence.due()
    every_poll = base.ProcessCadence(0.0)
    assert every_poll.due() and every_poll.due() and every_poll.read_at is None


def test_a_replay_answers_process_utilization_since_any_time(tmp_path: Path) -> None:
    # The capture asked "since t" for the t of its own polls; the backend on its cadence asks since other times. The
    # replay answers with the GPU's recorded answers in order (it raised "call not in the fixture", which a replayed
    # dashboard showed as a poll error every 3 s).
    nvml = ReplayNvml(load_fixture(PROCS_REPLAY))
    nvml.nvmlInit()
    handle = nvml.nvmlDeviceGetHandleByIndex(0)
    first = nvml.nvmlDeviceGetProcessUtilization(handle, 0)
    later = [nvml.nvmlDeviceGetProcessUtilization(handle, 1_796_193_999_000_000 + i) for i in range(8)]
    assert first and all(later)
    assert {s.pid for s in later[-1]} <= {p.pid for p in nvml.nvmlDeviceGetComputeRunningProcesses(handle)} | {
        s.pid for s in first
    }
    backend, _nvml = _backend(tmp_path, every=0.0)
    for _ in range(12):  # twice the capture's polls, each asking since the last
        snap = backend.sample()
        assert not snap.flags and not any(g.lost for g in snap.gpus), snap.flags
