"""Issue 23 item 15: on a partitioned (CPX) demo node the simulated workers' RCCL logs carry the bus ids of the
devices their ranks use, partitions included, so a transport fallback is tagged on the GPU the ranks run on.

HIP device 5 in CPX is partition 5 of GPU 0; its bus id carries the partition in the PCI function bits (amd.md §5:
``0000:05:00.5``). Before, the demo's servers mapped HIP index 5 to physical GPU 5 and the fallback of qwen-32b (HIP
devices 4, 5 = partitions of GPU 0) was flagged on GPUs 4 and 5.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import tomlkit

from amdtop.hip_devices import bus_devices, device_bdf, partition_bdf
from amdtop.logread.rccl.diagnose import diagnose
from amdtop.logread.rccl.monitor import LogMonitor, LogUpdate
from amdtop.logread.rccl.parser import parse_lines
from amdtop.model import FlagKind
from amdtop.simserver.__main__ import visible_bdfs
from amdtop.simserver.logs import rccl_init_lines
from amdtop.supervisor import Supervisor
from amdtop.supervisor.demo import demo_profiles_text, ensure_demo_profiles
from amdtop.telemetry.sim import PARTITION_ENV, SimBackend
from tests.gates import PASS
from tests.unit.test_rccl_demo_workers import PROFILE, _free_ports
from widgets.log_summary import render_logs


def test_partition_bus_ids() -> None:
    cpx = SimBackend(partition="CPX").topology()
    assert partition_bdf("0000:05:00.0", 5) == "0000:05:00.5"
    assert device_bdf(cpx, 5) == "0000:05:00.5" and device_bdf(cpx, 12) == "0000:26:00.4"
    assert bus_devices(cpx)["0000:26:00.4"] == (1, 4)
    assert device_bdf(SimBackend().topology(), 5) == "0000:a6:00.0"  # unpartitioned: HIP index = GPU index
    assert visible_bdfs({"HIP_VISIBLE_DEVICES": "4,5", PARTITION_ENV: "CPX/NPS4"}) == ("0000:05:00.4", "0000:05:00.5")
    assert visible_bdfs({"HIP_VISIBLE_DEVICES": "4,5"}) == ("0000:85:00.0", "0000:a6:00.0")


def test_demo_profiles_tell_the_servers_the_mode() -> None:
    doc = tomlkit.parse(demo_profiles_text(SimBackend(partition="CPX").topology(), 18000)).unwrap()
    assert {w["env"].get(PARTITION_ENV) for w in doc["worker"]} == {"CPX/NPS4"}
    plain = tomlkit.parse(demo_profiles_text(SimBackend().topology(), 18000)).unwrap()
    assert {w["env"].get(PARTITION_ENV) for w in plain["worker"]} == {None}


def test_fallback_between_partitions_is_flagged_on_their_gpu() -> None:
    cpx = SimBackend(partition="CPX").topology()
    env = {"HIP_VISIBLE_DEVICES": "4,5", PARTITION_ENV: "CPX/NPS4"}
    lines = rccl_init_lines(2, 4000, bdfs=visible_bdfs(env), p2p=False, host="amdtop-demo")
    flags = diagnose(parse_lines(lines), cpx, "qwen-32b")
    assert [(f.kind, f.gpus) for f in flags] == [(FlagKind.TRANSPORT_FALLBACK, (0,))]
    assert "rank 0->1 (GPU 0.4->0.5)" in flags[0].message
    assert "the partitions share GPU 0's internal XGMI" in flags[0].message


def test_supervised_sim_workers_on_a_cpx_node(tmp_path: Path) -> None:
    sim = SimBackend(partition="CPX")
    base = _free_ports(2)
    profile = tmp_path / "workers.toml"
    text = PROFILE.format(p0=base, p1=base + 1, py=sys.executable)
    profile.write_text(text.replace('NCCL_DEBUG = "INFO"\n', f'NCCL_DEBUG = "INFO"\n{PARTITION_ENV} = "CPX/NPS4"\n'))
    sup = Supervisor(profile, tmp_path / "state", gate=PASS, topology=sim.topology(), grace_s=5)
    try:
        for name in sup.names():
            sup.launch(name)
        monitor = LogMonitor(lambda: [(w.name, Path(w.log)) for w in sup.status() if w.log], sim.topology())
        deadline = time.monotonic() + 30
        update: LogUpdate | None = None
        while time.monotonic() < deadline:
            update = monitor.poll()
            done = [w for w in update.workers if w.comms and w.comms[0].init_complete == w.comms[0].nranks]
            if len(done) == 2:
                break
            time.sleep(0.2)
        assert update is not None and len(update.workers) == 2, update
    finally:
        for name in sup.names():
            sup.stop(name)
        sup.close()
    llama, qwen = update.worker("llama-70b"), update.worker("qwen-32b")
    assert llama is not None and qwen is not None
    assert [(c.gpus, c.summary) for c in llama.comms] == [
        ((0, 0, 0, 0), "4 ranks, all pairs P2P/IPC over XGMI (GPUs 0.0,0.1,0.2,0.3)")
    ]
    assert [(f.kind, f.worker, f.gpus) for f in update.flags] == [(FlagKind.TRANSPORT_FALLBACK, "qwen-32b", (0,))]
    head = render_logs(update.workers, update.flags).plain
    assert "! transport_fallback [qwen-32b · GPUs 0]:" in head
    assert "SHM/direct FALLBACK: the partitions share a XGMI link: 0→1 GPU 0.4→0.5, 1→0 GPU 0.5→0.4" in head


def test_each_partition_mode_has_its_own_demo_file(tmp_path: Path) -> None:
    plain = ensure_demo_profiles(tmp_path, SimBackend().topology(), port_base=18000)
    cpx = ensure_demo_profiles(tmp_path, SimBackend(partition="CPX").topology(), port_base=18000)
    assert (plain.name, cpx.name) == ("demo-profiles.toml", "demo-profiles-cpx-nps4.toml")
    assert PARTITION_ENV in cpx.read_text() and PARTITION_ENV not in plain.read_text()
