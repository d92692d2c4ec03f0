"""Simulated TP workers launched by the real supervisor (as the demo does, with ``NCCL_DEBUG=INFO`` in their env):
their logs, followed by a real :class:`LogMonitor` from the workers' status, give the Logs pane its communicators and
the fallback flag on the TP group whose P2P is disabled."""

from __future__ import annotations

import socket
import sys
import time
from pathlib import Path

from amdtop.logread.rccl.monitor import LogMonitor, LogUpdate
from amdtop.model import FlagKind
from amdtop.supervisor import Supervisor
from amdtop.telemetry.sim import SimBackend
from tests.gates import PASS
from widgets.log_summary import render_logs


def _free_ports(n: int) -> int:
    # a base port with n free ports after it (good enough on loopback for a test)
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            base = int(s.getsockname()[1])
        if base + n < 65000:
            return base


PROFILE = """
[[worker]]
name = "llama-70b"
model = "sim-llama"
gpus = [0, 1, 2, 3]
numa_node = "none"
port = {p0}
command = ["{py}", "-m", "amdtop.simserver"]
[worker.env]
NCCL_DEBUG = "INFO"

[[worker]]
name = "qwen-32b"
model = "sim-qwen"
gpus = [4, 5]
numa_node = "none"
port = {p1}
command = ["{py}", "-m", "amdtop.simserver"]
[worker.env]
NCCL_DEBUG = "INFO"
NCCL_P2P_DISABLE = "1"
"""


def test_supervised_sim_workers_feed_the_logs_pane(tmp_path: Path) -> None:
    sim = SimBackend()
    base = _free_ports(2)
    profile = tmp_path / "workers.toml"
    profile.write_text(PROFILE.format(p0=base, p1=base + 1, py=sys.executable))
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
    assert [(c.nranks, c.gpus, c.summary) for c in llama.comms] == [
        (4, (0, 1, 2, 3), "4 ranks, all pairs P2P/IPC over XGMI (GPUs 0,1,2,3)")
    ]
    assert [(c.nranks, c.gpus) for c in qwen.comms] == [(2, (4, 5))]
    assert [(f.kind, f.worker, f.gpus) for f in update.flags] == [(FlagKind.TRANSPORT_FALLBACK, "qwen-32b", (4, 5))]
    head = render_logs(update.workers, update.flags).plain
    assert "! transport_fallback [qwen-32b · GPUs 4,5]:" in head
    assert "llama-70b · RCCL 2.20.5 · comm-1: 4 ranks, all pairs P2P/IPC over XGMI (GPUs 0,1,2,3)" in head
    assert "SHM/direct FALLBACK: the GPUs share a XGMI link: 0→1 GPU 4→5, 1→0 GPU 5→4" in head
