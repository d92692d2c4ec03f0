"""The launch gate: each reason on the simulator and on built sysfs trees; refusal is one line per reason, --force
overrides it and the worker's state records what was forced. The gate runs the audit's own rules."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from amdtop.audit.gate import GateRefused, LaunchGate
from amdtop.cli.main import main
from amdtop.supervisor import Supervisor
from amdtop.supervisor.profiles import Profile
from amdtop.telemetry.sim import GpuDemand, SimBackend
from amdtop.telemetry.sysfs import SysfsBackend
from tests.fixtures.audit_tree import GIB, healthy_node, set_vram_used, write
from tests.fixtures.sysfs_tree import build_mi300x_8, build_mi300x_8_partitioned

PROFILE = Profile("llama", "/m", (0, 1), "none", 18731)


@pytest.fixture
def sim() -> SimBackend:
    return SimBackend(clock=lambda: 1.0)


def gate(sim: SimBackend) -> LaunchGate:
    return LaunchGate(sim.topology(), sim.sample)


def titles(g: LaunchGate, profile: Profile = PROFILE, own: tuple[int, ...] = ()) -> list[str]:
    return [f.title for f in g.check(profile, own)]


@pytest.fixture
def vllm_title() -> Iterator[int]:
    # A leftover rank as ps shows it: its argv[0] is vLLM's process title.
    proc = subprocess.Popen(["VLLM::Worker_TP1", "60"], executable="/bin/sleep")
    cmdline = Path(f"/proc/{proc.pid}/cmdline")
    for _ in range(200):  # the title shows once exec has finished
        if cmdline.read_bytes().startswith(b"VLLM::"):
            break
        time.sleep(0.01)
    yield proc.pid
    proc.kill()
    proc.wait()


def test_clean_simulated_node_passes(sim: SimBackend) -> None:
    assert titles(gate(sim)) == []


def test_vram_held_by_a_dead_process(sim: SimBackend) -> None:
    dead = subprocess.Popen(["true"])
    dead.wait()
    sim.set_demand("ghost", {1: GpuDemand(0.0, 60 * GIB, pid=dead.pid, name="python3")})
    found = titles(gate(sim))
    assert "GPU 1: 60.3 GiB of VRAM held by no live process" in found
    # The dead process's memory is not free either: the group's free VRAM differs too.
    assert "free VRAM differs by 31 % across llama's GPUs" in found


def test_leftover_vllm_on_the_target_gpu_but_not_the_workers_own(sim: SimBackend, vllm_title: int) -> None:
    sim.set_demand("old", {0: GpuDemand(0.0, 80 * GIB, pid=vllm_title, name="VLLM::Worker_TP")})
    found = titles(gate(sim))
    assert "1 leftover vLLM process(es) hold llama's GPUs or port" in found
    # A restart does not refuse the worker's own processes.
    assert not [t for t in titles(gate(sim), own=(vllm_title,)) if "leftover" in t]


def test_leftover_listener_on_the_port(sim: SimBackend) -> None:
    code = "import socket, time; s = socket.socket(); s.bind(('127.0.0.1', 18731)); s.listen(); time.sleep(60)"
    proc = subprocess.Popen([sys.executable, "-c", code, "vllm", "serve"])
    try:
        for _ in range(100):
            found = gate(sim).check(PROFILE)
            if found:
                break
            subprocess.run(["sleep", "0.05"], check=True)
        (f,) = found
        assert f.evidence[0].startswith(f"port 18731: pid {proc.pid} ")
    finally:
        proc.kill()
        proc.wait()


def test_free_vram_spread_over_ten_percent(sim: SimBackend) -> None:
    sim.set_demand("someone", {1: GpuDemand(0.3, 40 * GIB, pid=os.getpid(), name="python3")})
    assert titles(gate(sim)) == ["free VRAM differs by 21 % across llama's GPUs"]


def test_uncorrectable_ecc(sim: SimBackend) -> None:
    sim.add_ecc_errors(0, "umc", uncorrectable=3)
    assert titles(gate(sim)) == ["GPU 0: uncorrectable ECC errors or retired VRAM pages"]


def test_power_throttled_at_idle(sim: SimBackend) -> None:
    sim.throttle(1, "power_cap")
    assert titles(gate(sim)) == ["GPU 1 throttled at idle: power_cap"]


def test_gpus_outside_the_target_do_not_count(sim: SimBackend) -> None:
    sim.add_ecc_errors(5, "umc", uncorrectable=1)
    sim.throttle(6, "socket_thermal")
    assert titles(gate(sim)) == []


def test_partition_modes_differing_on_a_sysfs_tree(tmp_path: Path) -> None:
    tree = healthy_node(build_mi300x_8_partitioned(tmp_path, "SPX", "NPS1"))
    (tree.device_dir(3) / "current_memory_partition").write_text("NPS4\n")
    backend = SysfsBackend(tree.root, tree.proc_root)
    g = LaunchGate(backend.topology(), backend.sample, sys_root=tree.root, proc_root=tree.proc_root)
    assert titles(g, Profile("llama", "/m", (2, 3), "none", 18734)) == ["partition modes differ across llama's GPUs"]


def test_retired_pages_and_orphans_on_a_sysfs_tree(tmp_path: Path) -> None:
    tree = healthy_node(build_mi300x_8(tmp_path))
    write(tree, "devices/pci0000:00/0000:26:00.0/ras/gpu_vram_bad_pages", "0x0000000abc : 0x00001000 : R\n")
    set_vram_used(tree, 0, 100 * GIB)
    backend = SysfsBackend(tree.root, tree.proc_root)
    g = LaunchGate(backend.topology(), backend.sample, sys_root=tree.root, proc_root=tree.proc_root)
    got = titles(g, Profile("llama", "/m", (0, 1), "none", 18732))
    assert "GPU 1: uncorrectable ECC errors or retired VRAM pages" in got
    assert any(t.startswith("GPU 0: ") and "held by no live process" in t for t in got)


SLEEPER = "import time\ntime.sleep(600)\n"


def write_profile(tmp: Path) -> Path:
    (tmp / "prog.py").write_text(SLEEPER)
    cfg = tmp / "workers.toml"
    cfg.write_text(
        textwrap.dedent(f"""\
        [[worker]]
        name = "llama"
        model = "/m"
        gpus = [0, 1]
        numa_node = "none"
        port = 18733
        command = ["{sys.executable}", "{tmp / "prog.py"}"]
        """)
    )
    return cfg


def test_supervisor_refuses_then_force_overrides_and_records(tmp_path: Path, sim: SimBackend) -> None:
    sim.add_ecc_errors(1, "umc", uncorrectable=1)
    sim.throttle(0, "power_cap")
    sup = Supervisor(write_profile(tmp_path), tmp_path / "state", gate=gate(sim), topology=sim.topology(), grace_s=1.0)
    try:
        with pytest.raises(GateRefused) as err:
            sup.launch("llama")
        lines = str(err.value).splitlines()
        assert lines[0] == "worker[llama]: launch refused (2 reason(s); --force overrides):"
        assert sorted(lines[1:]) == [
            "  GPU 0 throttled at idle: power_cap",
            "  GPU 1: uncorrectable ECC errors or retired VRAM pages",
        ]
        assert sup.store.load("llama") is None  # nothing started
        sup.launch("llama", force=True)
        rec = sup.store.load("llama")
        assert rec is not None and sorted(rec.forced) == [
            "GPU 0 throttled at idle: power_cap",
            "GPU 1: uncorrectable ECC errors or retired VRAM pages",
        ]
        # A restart checks again (the worker's own processes aside) and keeps it running when refused.
        with pytest.raises(GateRefused):
            sup.restart("llama")
        assert sup.status_one("llama").pid == rec.pid
    finally:
        sup.stop("llama", grace=0.2)
        sup.close()


def test_cli_launch_refused_exit_1_then_forced_and_recorded(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = write_profile(tmp_path)
    tree = healthy_node(build_mi300x_8(tmp_path / "node"))
    for proc_dir in (tree.root / "class/kfd/kfd/proc").iterdir():  # no GPU process: nothing orphaned either
        for f in proc_dir.iterdir():
            f.unlink()
        proc_dir.rmdir()
    for i in range(8):
        set_vram_used(tree, i, 283 * 1024**2)
    write(tree, "devices/pci0000:00/0000:26:00.0/ras/umc_err_count", "ue: 4\nce: 0\n")
    state = tmp_path / "state"
    argv = ["--backend", "sysfs", "--sysfs-root", str(tree.root), "--config", str(cfg), "--state-dir", str(state)]
    assert main([*argv, "workers", "launch", "llama"]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err == [
        "amdtop: error: worker[llama]: launch refused (1 reason(s); --force overrides):",
        "  GPU 1: uncorrectable ECC errors or retired VRAM pages",
    ]
    try:
        assert main([*argv, "workers", "launch", "llama", "--force"]) == 0
        assert "launch gate overridden by --force (recorded): GPU 1: uncorrectable" in capsys.readouterr().err
        assert '"forced": [' in (state / "workers" / "llama.json").read_text()
    finally:
        main([*argv, "workers", "stop", "llama", "--grace", "0.2"])


RANKED = """
import subprocess, sys, time
rank = subprocess.Popen(["VLLM::Worker_TP0", "600"], executable="/bin/sleep")
open(sys.argv[1], "w").write(str(rank.pid))
time.sleep(600)
"""


def test_restart_does_not_count_the_workers_own_ranks(tmp_path: Path, sim: SimBackend) -> None:
    # The worker's rank holds its GPU under a vLLM title; the supervisor never saw it (no status pass): it is still
    # the worker's own (same process group, launch marker), not a leftover.
    (tmp_path / "prog.py").write_text(RANKED)
    cfg = tmp_path / "workers.toml"
    cfg.write_text(
        f'[[worker]]\nname = "llama"\nmodel = "{tmp_path / "rank.pid"}"\ngpus = [0, 1]\nnuma_node = "none"\n'
        f'port = 18735\ncommand = ["{sys.executable}", "{tmp_path / "prog.py"}"]\n'
    )
    sup = Supervisor(cfg, tmp_path / "state", gate=gate(sim), topology=sim.topology(), grace_s=1.0)
    try:
        sup.launch("llama")
        pid_file = tmp_path / "rank.pid"
        for _ in range(500):
            if pid_file.exists() and pid_file.read_text():
                break
            time.sleep(0.01)
        rank = int(pid_file.read_text())
        sim.set_demand("llama", {g: GpuDemand(0.0, 50 * GIB, pid=rank) for g in (0, 1)})
        for _ in range(500):  # until exec has put the title in place
            if Path(f"/proc/{rank}/cmdline").read_bytes().startswith(b"VLLM::"):
                break
            time.sleep(0.01)
        assert "leftover" in " ".join(titles(gate(sim)))  # to anyone else, it is a vLLM process on GPUs 0-1
        sup.restart("llama")  # not refused
        assert sup.store.load("llama").restarts == 1  # type: ignore[union-attr]
    finally:
        sup.stop("llama", grace=0.2)
        sup.close()


def test_leftover_sglang_scheduler_on_the_target_gpu(sim: SimBackend) -> None:
    # A leftover SGLang rank as ps shows it: argv[0] is the title SGLang's scheduler sets (sglang::scheduler_TP<t>).
    proc = subprocess.Popen(["sglang::scheduler_TP0", "60"], executable="/bin/sleep")
    try:
        cmdline = Path(f"/proc/{proc.pid}/cmdline")
        for _ in range(200):
            if cmdline.read_bytes().startswith(b"sglang::"):
                break
            time.sleep(0.01)
        sim.set_demand("old", {0: GpuDemand(0.0, 80 * GIB, pid=proc.pid, name="sglang::schedul")})
        assert "1 leftover vLLM process(es) hold llama's GPUs or port" in titles(gate(sim))
    finally:
        proc.kill()
        proc.wait()
