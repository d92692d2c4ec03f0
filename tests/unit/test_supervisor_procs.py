"""The supervisor with real processes: process groups, SIGTERM-ignoring children, escapees, re-attach, restarts."""

from __future__ import annotations

import os
import signal
import sys
import textwrap
import time
from pathlib import Path

import pytest

from amdtop.errors import InputError
from amdtop.model import WorkerState
from amdtop.procinfo import read_environ
from amdtop.supervisor import Supervisor
from amdtop.supervisor.procs import scan
from amdtop.telemetry.sim import SimBackend
from tests.gates import PASS

TOPO = SimBackend().topology()

# Forks two children that each fork a grandchild; everyone stays in the launch's process group.
FAMILY = """
import os, sys, time
out = sys.argv[1]
for _ in range(2):
    if os.fork() == 0:
        if os.fork() == 0:
            open(out + f".{os.getpid()}", "w").close()
            time.sleep(600)
        open(out + f".{os.getpid()}", "w").close()
        time.sleep(600)
open(out + f".{os.getpid()}", "w").close()
time.sleep(600)
"""

# Leader and one child ignore SIGTERM: only SIGKILL after the grace ends them.
STUBBORN = """
import os, signal, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
if os.fork() == 0:
    open(sys.argv[1] + f".{os.getpid()}", "w").close()
    time.sleep(600)
open(sys.argv[1] + f".{os.getpid()}", "w").close()
time.sleep(600)
"""

# Double-forks out of the group and session, renames itself VLLM::Worker_TP and maps a /dev/shm/vllm* segment,
# keeping the inherited AMDTOP_WORKER marker: only the sweep can find it.
ESCAPEE = """
import ctypes, mmap, os, signal, sys, time
out, shm = sys.argv[1], sys.argv[2]
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        ctypes.CDLL(None).prctl(15, b"VLLM::Worker_TP", 0, 0, 0)  # PR_SET_NAME
        fd = os.open(shm, os.O_CREAT | os.O_RDWR, 0o600)
        os.ftruncate(fd, 4096)
        m = mmap.mmap(fd, 4096)
        open(out + f".{os.getpid()}", "w").close()
        time.sleep(600)
    os._exit(0)
time.sleep(600)
"""


def write_profile(tmp: Path, script: str, *, numa: str = '"none"', port: int = 18020, extra_args: str = "") -> Path:
    (tmp / "prog.py").write_text(textwrap.dedent(script))
    cfg = tmp / "workers.toml"
    cfg.write_text(
        f'# test worker\n[[worker]]\nname = "w"\nmodel = "{tmp / "out"}"\ngpus = [0]\nnuma_node = {numa}\n'
        f'port = {port}\ncommand = ["{sys.executable}", "{tmp / "prog.py"}"]\n{extra_args}'
    )
    return cfg


def wait_files(tmp: Path, n: int, timeout: float = 10.0) -> set[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pids = {int(p.suffix[1:]) for p in tmp.glob("out.*")}
        if len(pids) >= n:
            return pids
        time.sleep(0.02)
    raise AssertionError(f"only {len(list(tmp.glob('out.*')))} of {n} processes reported")


def alive(pids: set[int]) -> set[int]:
    table = scan()
    return {p for p in pids if p in table}


def marked(prefix: str) -> set[int]:
    return {p for p in scan() if read_environ(p).get("AMDTOP_WORKER", "").startswith(prefix)}


@pytest.fixture
def sup_for(tmp_path: Path):  # type: ignore[no-untyped-def]
    made: list[Supervisor] = []

    def make(cfg: Path, **kw: object) -> Supervisor:
        sup = Supervisor(cfg, tmp_path / "state", gate=PASS, topology=TOPO, grace_s=2.0, **kw)  # type: ignore[arg-type]
        made.append(sup)
        return sup

    yield make
    for sup in made:
        for name in sup.names():
            sup.stop(name, grace=0.2)
        sup.close()


def test_stop_takes_grandchildren_of_the_group(tmp_path: Path, sup_for) -> None:  # type: ignore[no-untyped-def]
    sup = sup_for(write_profile(tmp_path, FAMILY, numa="0"))
    st = sup.launch("w")
    pids = wait_files(tmp_path, 5)
    assert st.pgid == st.pid
    assert set(sup.status_one("w").pids) >= pids  # numactl execs, so the leader is python itself
    rep = sup.stop("w")
    assert set(rep.terminated) >= pids and not rep.killed and not rep.swept_pids
    assert not alive(pids)
    assert sup.status_one("w").state is WorkerState.STOPPED


def test_sigterm_ignored_gets_sigkill_after_grace(tmp_path: Path, sup_for) -> None:  # type: ignore[no-untyped-def]
    sup = sup_for(write_profile(tmp_path, STUBBORN))
    sup.launch("w")
    pids = wait_files(tmp_path, 2)
    rep = sup.stop("w", grace=0.3)
    assert set(rep.killed) == pids
    assert not alive(pids)


def test_escapee_with_vllm_title_and_its_shm_are_swept(tmp_path: Path, sup_for) -> None:  # type: ignore[no-untyped-def]
    cfg = write_profile(tmp_path, ESCAPEE)
    ours = f"/dev/shm/vllm_amdtop_test_{os.getpid()}_ours"
    other = Path(f"/dev/shm/vllm_amdtop_test_{os.getpid()}_other")
    other.write_bytes(b"not ours")
    text = cfg.read_text().replace(
        f'"{tmp_path / "prog.py"}"]', f'"{tmp_path / "prog.py"}", "{tmp_path / "out"}", "{ours}"]'
    )
    # The positional model follows: the script reads argv[1:3] only.
    cfg.write_text(text)
    sup = sup_for(cfg)
    launched = sup.launch("w")
    [escapee] = wait_files(tmp_path, 1)
    assert (Path(f"/proc/{escapee}/comm").read_text().strip()) == "VLLM::Worker_TP"
    assert os.getpgid(escapee) != launched.pgid
    try:
        rep = sup.stop("w", grace=0.5)
        assert escapee in rep.swept_pids and escapee not in rep.terminated
        assert ours in rep.swept_shm and not Path(ours).exists()
        assert other.exists(), "a segment of another launch was removed"
        assert not alive({escapee})
    finally:
        other.unlink(missing_ok=True)
        Path(ours).unlink(missing_ok=True)


def test_reattach_from_state_and_crash_with_orphans(tmp_path: Path, sup_for) -> None:  # type: ignore[no-untyped-def]
    cfg = write_profile(tmp_path, FAMILY)
    first = sup_for(cfg)
    launched = first.launch("w")
    pids = wait_files(tmp_path, 5)
    first.close()
    second = sup_for(cfg)  # a new amdtop on the same state dir
    st = second.status_one("w")
    assert st.pid == launched.pid and set(st.pids) >= pids and st.state is WorkerState.STARTING
    # SIGKILL the leader alone (vLLM's API server dying): the rest lives on as orphans in the group.
    os.kill(launched.pid or 0, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while launched.pid in second.status_one("w").pids and time.monotonic() < deadline:
        time.sleep(0.05)
    crashed = second.status_one("w")
    assert crashed.state is WorkerState.CRASHED
    assert set(crashed.pids) == pids - {launched.pid}
    rep = second.stop("w")
    assert not alive(pids) and set(rep.terminated) == pids - {launched.pid}


def test_twenty_restarts_leave_nothing_and_leak_no_fds(tmp_path: Path, sup_for) -> None:  # type: ignore[no-untyped-def]
    sup = sup_for(write_profile(tmp_path, FAMILY))
    sup.launch("w")
    wait_files(tmp_path, 5)
    sup.status()
    fds_before = len(os.listdir("/proc/self/fd"))
    seen: set[int] = set()
    for _ in range(20):
        old = sup.record("w")
        assert old is not None
        for f in tmp_path.glob("out.*"):
            f.unlink()
        st = sup.restart("w", grace=1.0)
        seen |= wait_files(tmp_path, 5)
        assert not marked(f"w:{old.launch_id}")
        sup.status()
    assert st.restarts == 20
    assert len(os.listdir("/proc/self/fd")) == fds_before
    sup.stop("w")
    assert not marked("w:") and not alive(seen)


def test_crash_shows_last_log_lines(tmp_path: Path, sup_for) -> None:  # type: ignore[no-untyped-def]
    sup = sup_for(write_profile(tmp_path, "import sys\nprint('boom: engine died', flush=True)\nsys.exit(3)\n"))
    sup.launch("w")
    deadline = time.monotonic() + 10
    while (st := sup.status_one("w")).state is not WorkerState.CRASHED and time.monotonic() < deadline:
        time.sleep(0.05)
    assert st.state is WorkerState.CRASHED and "boom: engine died" in st.last_log_lines
    with pytest.raises(Exception, match="boom: engine died"):
        sup.wait_ready("w", timeout=1)


def test_demo_worker_runs_simserver_and_drives_sim_gpus(tmp_path: Path) -> None:
    sim = SimBackend()
    sup = Supervisor(
        tmp_path / "none.toml",
        tmp_path / "st",
        gate=PASS,
        topology=sim.topology(),
        demo=True,
        sim=sim,
        demo_port_base=18060,
    )
    try:
        launched = sup.launch("qwen-32b")
        argv = Path(f"/proc/{launched.pid}/cmdline").read_bytes().split(b"\0")
        assert b"amdtop.simserver" in argv and b"--tensor-parallel-size" in argv
        st = sup.wait_ready("qwen-32b", timeout=30, poll=0.1)
        assert st.numa_node == 1 and st.mems_allowed == (1,)  # the simulated node's binding
        statuses = sup.status()
        rows = {r.name: r for r in statuses}
        assert rows["qwen-32b"].state is WorkerState.READY and rows["llama-70b"].state is WorkerState.STOPPED
        feed = sup.demo_load()
        assert feed is not None
        feed(statuses)  # what the node pipeline does each tick in demo mode
        snap = sim.sample()
        assert snap.gpus[4].vram_used_bytes > 100 * 1024**3 and snap.gpus[0].vram_used_bytes < 1024**3  # type: ignore[operator]
        assert any(p.pid == st.pid for p in snap.gpus[5].processes)
        sup.stop("qwen-32b", grace=5)
        # The pipeline refeeds the statuses of the tick before (taken while it ran): the exited pid and its VRAM
        # are gone from the next sample all the same, as a driver frees them (the launch gate read a stopped demo
        # worker's leftovers as "VRAM held by no live process" and refused its relaunch).
        feed(statuses)
        after = sim.sample()
        assert after.gpus[4].vram_used_bytes < 1024**3  # type: ignore[operator]
        assert not any(p.pid == st.pid for g in after.gpus for p in g.processes)
        feed(sup.status())
        assert sim.sample().gpus[4].vram_used_bytes < 1024**3  # type: ignore[operator]
    finally:
        sup.stop("qwen-32b", grace=0.5)
        sup.close()


def test_bad_restart_keeps_the_running_worker(tmp_path: Path, sup_for) -> None:  # type: ignore[no-untyped-def]
    cfg = write_profile(tmp_path, FAMILY)
    sup = sup_for(cfg)
    first = sup.launch("w")
    pids = wait_files(tmp_path, 5)
    with pytest.raises(Exception, match=r"worker\[w\]: already running"):
        sup.launch("w")
    cfg.write_text(cfg.read_text().replace(sys.executable, "/no/such/python"))
    broken = sup_for(cfg)
    with pytest.raises(InputError, match=r"worker\[w\]\.command: '/no/such/python' not found"):
        broken.restart("w")
    assert alive(pids) == pids and broken.status_one("w").pid == first.pid


def test_launch_refused_while_orphans_of_last_run_live(tmp_path: Path, sup_for) -> None:  # type: ignore[no-untyped-def]
    sup = sup_for(write_profile(tmp_path, FAMILY))
    first = sup.launch("w")
    pids = wait_files(tmp_path, 5)
    os.kill(first.pid or 0, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while first.pid in alive(pids) and time.monotonic() < deadline:
        time.sleep(0.02)
    with pytest.raises(InputError, match=r"worker\[w\]: 4 process\(es\) of its last run are still alive"):
        sup.launch("w")
    sup.stop("w")
    assert not alive(pids)
    sup.launch("w")


def test_cli_launch_survives_its_process_and_cli_stop_sweeps(tmp_path: Path, sup_for) -> None:  # type: ignore[no-untyped-def]
    import subprocess

    cfg = write_profile(tmp_path, FAMILY)
    base = [
        sys.executable,
        "-m",
        "amdtop",
        "--backend",
        "sim",
        "--config",
        str(cfg),
        "--state-dir",
        str(tmp_path / "state"),
    ]
    done = subprocess.run([*base, "workers", "launch", "w"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    pids = wait_files(tmp_path, 5)  # the launching process has exited; the worker lives on in its own session
    st = sup_for(cfg).status_one("w")
    assert set(st.pids) >= pids and st.state is WorkerState.STARTING
    status = subprocess.run([*base, "workers", "status", "--json"], capture_output=True, text=True, timeout=60)
    assert '"state": "starting"' in status.stdout
    stop = subprocess.run([*base, "workers", "stop", "w", "--grace", "2"], capture_output=True, text=True, timeout=60)
    assert stop.returncode == 0 and "5 terminated" in stop.stderr
    assert not alive(pids)
