"""Every process on the GPUs: the real H200 capture with two CUDA processes, real host processes, owners, totals,
JSON and exporter rows, and the signal policy against real processes."""

from __future__ import annotations

import getpass
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from amdtop.exporter.families import build_families
from amdtop.gpuprocs import FOREIGN, HostInfo, HostProcs, ProcessRow, build_rows
from amdtop.gpuprocs import host as host_module
from amdtop.gpuprocs.report import EXPORT_TOP, memory_series
from amdtop.gpuprocs.signals import Refusal, SignalPlan, plan_signal, send_signal
from amdtop.model import GpuProcess, GpuSample, NodeSnapshot, WorkerState, WorkerStatus
from amdtop.pipeline import NodePipeline
from amdtop.report import frame_json, snapshot_json
from amdtop.telemetry.base import BackendOptions
from amdtop.telemetry.nvml import NvmlBackend
from amdtop.telemetry.nvml_procutil import ProcessUtilization
from amdtop.telemetry.nvml_replay import ReplayNvml, ReplayNVMLError, load_fixture, materialize
from amdtop.telemetry.sim import GIB, GpuDemand, SimBackend

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "nvml"
PROCS_REPLAY = FIXTURES / "h200_procs_replay.json"
OLD_REPLAY = FIXTURES / "h200_health_replay.json"


def _replay(path: Path, tmp_path: Path) -> tuple[NvmlBackend, dict[str, Any]]:
    fixture = load_fixture(path)
    sysfs, proc = materialize(fixture, tmp_path)
    return NvmlBackend(ReplayNvml(fixture), BackendOptions(sysfs_root=sysfs, proc_root=proc)), fixture


# -- the real H200 capture: a busy torch job (pid 477) and a second CUDA process (pid 478) ----------------------------


def test_h200_capture_two_processes_with_their_sm_share(tmp_path: Path) -> None:
    backend, fixture = _replay(PROCS_REPLAY, tmp_path)
    shares = []
    for _ in range(fixture["meta"]["polls"]):
        snap = backend.sample()
        shares.append({p.pid: p.gpu_util_pct for p in snap.gpus[0].processes})
    doc = snapshot_json(snap)
    expected = fixture["expected_snapshot"]
    assert doc["gpus"][0]["processes"] == expected["gpus"][0]["processes"]
    procs = {p.pid: p for p in snap.gpus[0].processes}
    assert procs[477].vram_bytes == 9_506_390_016 and procs[478].vram_bytes == 1_755_316_224
    assert procs[477].name == procs[478].name == "python3"
    # First poll: the whole sample ring (torch 88 %, the second process 1 %); then one sample a second from the busy
    # job only, so the idle process reads 0 %, not unknown.
    assert shares[0] == {477: 88.0, 478: 1.0}
    assert [s[477] for s in shares[1:]] == [93.0, 95.0, 95.0, 96.0, 95.0]
    assert all(s[478] == 0.0 for s in shares[1:])


def test_h200_capture_rows_totals_and_json(tmp_path: Path) -> None:
    backend, fixture = _replay(PROCS_REPLAY, tmp_path)
    pipeline = NodePipeline(backend, proc_root=tmp_path / "proc", discover=False)
    for _ in range(fixture["meta"]["polls"]):
        frame = pipeline.tick()
    # A captured proc tree is not this host: no host facts, never another process's that reuses the pid here.
    assert [(r.pid, r.owner, r.user, r.cpu_pct) for r in frame.processes] == [
        (477, FOREIGN, None, None),
        (478, FOREIGN, None, None),
    ]
    (total,) = frame.process_totals
    used = frame.snapshot.gpus[0].vram_used_bytes
    assert total.held_bytes == 9_506_390_016 + 1_755_316_224 and total.used_bytes == used
    assert total.unheld_bytes == used - total.held_bytes > 0  # driver reservation: held by no live process
    doc = frame_json(frame)
    gpu = doc["gpus"][0]
    assert [p["pid"] for p in gpu["processes"]] == [477, 478]
    for key in ("user", "cpu_pct", "rss_bytes", "elapsed_s", "command", "owner", "gpu_util_pct"):
        assert key in gpu["processes"][0]
    assert gpu["processes"][0]["gpu_util_pct"] == 95.0 and gpu["processes"][0]["owner"] == "foreign"
    assert gpu["processes_vram"] == {
        "processes": 2, "held_bytes": total.held_bytes, "used_bytes": used, "unheld_bytes": total.unheld_bytes,
    }  # fmt: skip


def test_capture_without_process_samples_gives_none_not_zero(tmp_path: Path) -> None:
    backend, _ = _replay(OLD_REPLAY, tmp_path)  # recorded before amdtop asked for process samples
    snap = backend.sample()
    assert snap.gpus[0].processes and all(p.gpu_util_pct is None for p in snap.gpus[0].processes)


class _Nvml:
    NVMLError = ReplayNVMLError

    def __init__(self, answers: list[Any]) -> None:
        self.answers = answers
        self.asked: list[int] = []

    def nvmlDeviceGetProcessUtilization(self, handle: object, since: int) -> Any:  # noqa: N802
        self.asked.append(since)
        answer = self.answers.pop(0)
        if isinstance(answer, int):
            raise ReplayNVMLError(answer)
        return answer


def _sample(pid: int, ts: int, sm: int) -> Any:
    from types import SimpleNamespace

    return SimpleNamespace(pid=pid, timeStamp=ts, smUtil=sm)


def test_process_utilization_since_the_newest_sample_and_error_codes() -> None:
    nv = _Nvml([[_sample(1, 10, 40), _sample(1, 20, 60), _sample(2, 15, 5)], 6, 0, [_sample(1, 30, 80)], 3])
    util = ProcessUtilization(nv)
    assert util.read(0, None) == {1: 50.0, 2: 5.0}  # mean of each pid's new samples
    assert util.read(0, None) == {}  # NOT_FOUND: no process ran since
    assert util.read(0, None) == {}  # SUCCESS with nothing: the same
    assert util.read(0, None) == {1: 80.0}
    assert util.read(0, None) is None  # NOT_SUPPORTED: remembered, never asked again
    assert util.read(0, None) is None
    assert nv.asked == [0, 20, 20, 20, 30]


# -- host facts of real processes ------------------------------------------------------------------------------------


def _cpu_s(pid: int) -> float:
    times = psutil.Process(pid).cpu_times()
    return float(times.user + times.system)


def _spawn(*argv: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", *argv])


def test_host_facts_of_real_processes_secrets_masked_and_cpu_between_reads() -> None:
    busy = _spawn("import sys\nwhile True: pass", "--api-key", "sk-live-123")
    idle = subprocess.Popen(["sleep", "30"])
    host = HostProcs()
    try:
        first = host.read([busy.pid, idle.pid, 999_999_999])
        assert set(first) == {busy.pid, idle.pid}  # a pid that does not exist is left out
        info = first[busy.pid]
        assert info.user == getpass.getuser() and info.uid == os.getuid()
        assert info.cpu_pct is None  # nothing to compare with yet
        assert info.command is not None and "sk-live-123" not in info.command and "--api-key ***" in info.command
        assert info.started_at is not None and abs(info.started_at - time.time()) < 60
        cpu0, t0 = _cpu_s(busy.pid), time.monotonic()
        time.sleep(1.0)
        second = host.read([busy.pid, idle.pid])
        # What the busy loop really got between the reads, from its own stat (a loaded box gives it a fraction of a
        # core): the figure must follow it, not a fixed share.
        got = 100.0 * (_cpu_s(busy.pid) - cpu0) / (time.monotonic() - t0)
        pct = second[busy.pid].cpu_pct
        assert pct is not None and got > 5 and 0.5 * got < pct < 2.0 * got + 10, (pct, got)
        assert second[idle.pid].cpu_pct is not None and second[idle.pid].cpu_pct < 5
        assert (second[busy.pid].rss_bytes or 0) > 1 << 20
        idle.kill()
        idle.wait()
        assert set(host.read([busy.pid, idle.pid])) == {busy.pid}  # exited: gone, its descriptor closed
    finally:
        busy.kill()
        busy.wait()
        host.close()


def test_host_reader_keeps_one_descriptor_per_process_and_closes_them() -> None:
    children = [subprocess.Popen(["sleep", "30"]) for _ in range(3)]
    before = len(os.listdir("/proc/self/fd"))
    host = HostProcs()
    try:
        for _ in range(3):
            host.read([c.pid for c in children])
        assert len(os.listdir("/proc/self/fd")) == before + 3
        host.read([children[0].pid])  # the others left the GPUs
        assert len(os.listdir("/proc/self/fd")) == before + 1
        host.close()
        assert len(os.listdir("/proc/self/fd")) == before
    finally:
        for c in children:
            c.kill()
            c.wait()


def test_host_rss_each_tick_is_what_psutil_and_top_report() -> None:
    # statm's resident count (psutil's and top's); stat's rss field reads the per-CPU counters unsummed on recent
    # kernels (6.18 here) and ran 40-50 pages short of it.
    idle = subprocess.Popen(
        [sys.executable, "-c", "import time\nprint(flush=True)\ntime.sleep(30)"], stdout=subprocess.PIPE
    )
    now = [0.0]
    host = HostProcs(lambda: now[0])
    try:
        assert idle.stdout is not None and idle.stdout.readline()  # started: its RSS no longer grows
        host.read([idle.pid])
        now[0] = 1.0
        info = host.read([idle.pid])[idle.pid]
        assert info.cpu_pct == 0.0 and info.rss_bytes == psutil.Process(idle.pid).memory_info().rss
    finally:
        idle.kill()
        idle.wait()
        host.close()


def test_host_reused_pid_answering_the_cpu_clock_is_not_taken_for_the_old_process(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    child = subprocess.Popen(["sleep", "30"])
    now = [0.0]
    host = HostProcs(lambda: now[0])
    try:
        assert set(host.read([child.pid])) == {child.pid}
        child.kill()
        child.wait()
        # A new process under the same pid would answer the clock read: stand one in. The kept descriptor is bound
        # to the process identified before, so the tick still drops the pid (no re-identification within 10 s).
        monkeypatch.setattr(host_module, "_clock_ns", lambda clock: 5 * 10**9)
        now[0] = 1.0
        assert host.read([child.pid]) == {}
    finally:
        host.close()


def test_host_thread_id_read_through_stat() -> None:
    # A thread id has no process CPU clock (clock_gettime says EINVAL): its facts come from /proc/TID/stat.
    proc = _spawn("import threading, time\nthreading.Thread(target=time.sleep, args=(60,)).start()\ntime.sleep(60)")
    now = [0.0]
    host = HostProcs(lambda: now[0])
    try:
        for _ in range(100):
            tids = [int(t) for t in os.listdir(f"/proc/{proc.pid}/task") if int(t) != proc.pid]
            if tids:
                break
            time.sleep(0.05)
        (tid,) = tids
        assert set(host.read([proc.pid, tid])) == {proc.pid, tid}
        now[0] = 1.0
        second = host.read([proc.pid, tid])
        assert second[tid].cpu_pct is not None and second[tid].command == second[proc.pid].command
        assert (second[tid].rss_bytes or 0) > 1 << 20
    finally:
        proc.kill()
        proc.wait()
        host.close()


# -- rows, owners, totals --------------------------------------------------------------------------------------------


def _snap(processes: dict[int, list[GpuProcess]], used: int = 100 * GIB) -> NodeSnapshot:
    sim = SimBackend(seed=1)
    base = sim.sample()
    gpus = tuple(
        GpuSample(
            s.index, vram_used_bytes=used, vram_total_bytes=192 * GIB, processes=tuple(processes.get(s.index, ()))
        )
        for s in base.gpus
    )
    return NodeSnapshot("sim", "h", 1000.0, base.topology, gpus)


def test_owner_is_worker_and_rank_discovered_vllm_or_foreign() -> None:
    snap = _snap({
        0: [GpuProcess(101, "VLLM::Worker_TP0", 40 * GIB), GpuProcess(900, "python3", 2 * GIB)],
        1: [GpuProcess(102, "VLLM::Worker_TP1", 40 * GIB)],
        4: [GpuProcess(201, "VLLM::EngineCore", 30 * GIB)],
    })  # fmt: skip
    workers = [
        WorkerStatus("llama", WorkerState.READY, (0, 1), pid=100, pids=(100, 101, 102), rank_pids=((0, 101), (1, 102))),
        WorkerStatus("vllm-200", WorkerState.READY, (4,), pid=200, pids=(200, 201), source="discovered"),
    ]
    host = {900: HostInfo(900, "alice", 1001, "python3 train.py", 950.0, 99.5, 3 * GIB)}
    rows, totals = build_rows(snap, workers, host)
    got = {(r.gpu, r.pid): (r.owner_label, r.owner_kind) for r in rows}
    assert got == {
        (0, 101): ("llama/r0", "worker"),
        (0, 900): ("foreign", "foreign"),
        (1, 102): ("llama/r1", "worker"),
        (4, 201): ("vllm-200/r0", "vllm"),
    }
    alice = next(r for r in rows if r.pid == 900)
    assert (alice.user, alice.cpu_pct, alice.elapsed_s, alice.command) == ("alice", 99.5, 50.0, "python3 train.py")
    assert [r.pid for r in rows if r.gpu == 0] == [101, 900]  # biggest holder first
    t0 = next(t for t in totals if t.gpu == 0)
    assert (t0.processes, t0.held_bytes, t0.unheld_bytes) == (2, 42 * GIB, 58 * GIB)
    t7 = next(t for t in totals if t.gpu == 7)
    assert (t7.processes, t7.held_bytes, t7.unheld_bytes) == (0, None, 100 * GIB)  # a leftover: no live holder


def test_partition_rows_keyed_apart_and_exported_as_one_series() -> None:
    snap = _snap({2: [GpuProcess(300, "p", 10 * GIB, partition=0), GpuProcess(300, "p", 12 * GIB, partition=1)]})
    rows, _ = build_rows(snap, [], {})
    assert [r.key for r in rows] == ["p-2.1-300", "p-2.0-300"]
    assert memory_series(rows) == [(2, 300, FOREIGN, 22 * GIB)]


def test_exporter_process_memory_bounded_to_the_top_32() -> None:
    sim = SimBackend(seed=1)
    for i in range(40):
        sim.set_demand(f"job{i}", {i % 8: GpuDemand(0.1, (i + 1) * GIB, 5000 + i, f"job{i}")})
    frame = NodePipeline(sim, discover=False).tick()
    assert len(frame.processes) == 40
    (fam,) = [f for f in build_families(frame) if f.name == "amdtop_gpu_process_memory_bytes"]
    assert len(fam.samples) == EXPORT_TOP
    values = sorted(s.value for s in fam.samples)
    assert values[0] == 9 * GIB and values[-1] == 40 * GIB  # the 32 biggest of 1..40 GiB
    sample = next(s for s in fam.samples if s.value == 40 * GIB)
    assert sample.labels == {"gpu_id": "7", "hostname": sample.labels["hostname"], "pid": "5039", "owner": "foreign"}


def test_sim_processes_carry_their_engine_share() -> None:
    sim = SimBackend(seed=1)
    sim.set_demand("a", {3: GpuDemand(0.42, GIB, 7)})
    (proc,) = sim.sample().gpus[3].processes
    assert proc.gpu_util_pct == 42.0


# -- signals -----------------------------------------------------------------------------------------------------------


def _row(**kw: Any) -> ProcessRow:
    base: dict[str, Any] = dict(
        gpu=0,
        pid=4242,
        name="python3",
        vram_bytes=GIB,
        user="alice",
        uid=1001,
        started_at=100.0,
        command="python3 x.py",
    )
    base.update(kw)
    return ProcessRow(**base)


def test_signal_refusals_say_why() -> None:
    me = os.geteuid()
    assert "read-only" in _reason(plan_signal(_row(uid=me), readonly=True, euid=me))
    worker = plan_signal(_row(uid=me, owner="llama", owner_kind="worker", rank=1), readonly=False, euid=me)
    assert isinstance(worker, Refusal) and worker.worker == "llama" and "stop the worker" in worker.reason
    other = plan_signal(_row(uid=1001), readonly=False, euid=1000)
    assert "belongs to alice" in _reason(other) and "only root" in _reason(other)
    assert "PID namespace" in _reason(plan_signal(_row(pid=0), readonly=False, euid=0))
    assert "amdtop itself" in _reason(plan_signal(_row(pid=os.getpid(), uid=me), readonly=False, euid=me))


def _reason(plan: SignalPlan | Refusal) -> str:
    assert isinstance(plan, Refusal), plan
    return plan.reason


def test_root_may_signal_another_users_process_and_the_question_says_so() -> None:
    plan = plan_signal(_row(uid=1001), readonly=False, euid=0)
    assert isinstance(plan, SignalPlan) and plan.signum == signal.SIGTERM
    assert "pid 4242 of user alice" in plan.question and "python3 x.py" in plan.question
    assert "amdtop runs as root: this signals alice's process" in plan.question
    again = plan_signal(_row(uid=1001), readonly=False, euid=0, termed=frozenset({(4242, 100.0)}))
    assert isinstance(again, SignalPlan) and again.signum == signal.SIGKILL and again.name == "KILL"


def _live_row(proc: subprocess.Popen[bytes]) -> ProcessRow:
    info = HostProcs().read([proc.pid])[proc.pid]
    return _row(pid=proc.pid, uid=info.uid, user=info.user, started_at=info.started_at, command=info.command)


def test_term_then_kill_a_real_process_that_ignores_term() -> None:
    stubborn = _spawn(
        "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nprint('ready', flush=True)\ntime.sleep(60)"
    )
    time.sleep(0.5)  # past the handler
    try:
        row = _live_row(stubborn)
        plan = plan_signal(row, readonly=False, euid=os.geteuid())
        assert isinstance(plan, SignalPlan) and plan.name == "TERM"
        assert send_signal(plan) == f"sent TERM to pid {row.pid} ({row.user})"
        time.sleep(0.3)
        assert stubborn.poll() is None  # TERM ignored
        kill = plan_signal(row, readonly=False, euid=os.geteuid(), termed=frozenset({(row.pid, row.started_at)}))
        assert isinstance(kill, SignalPlan) and kill.name == "KILL"
        send_signal(kill)
        assert stubborn.wait(5) == -signal.SIGKILL
    finally:
        stubborn.kill()
        stubborn.wait()


def test_no_signal_to_a_pid_that_is_now_another_process() -> None:
    proc = subprocess.Popen(["sleep", "30"])
    try:
        row = _live_row(proc)._replace(started_at=1.0)  # the process shown started long ago: not this one
        plan = plan_signal(row, readonly=False, euid=os.geteuid())
        assert isinstance(plan, SignalPlan)
        with pytest.raises(ProcessLookupError, match="now another process"):
            send_signal(plan)
        assert proc.poll() is None
    finally:
        proc.kill()
        proc.wait()
    with pytest.raises(ProcessLookupError, match="exited"):
        send_signal(plan)
