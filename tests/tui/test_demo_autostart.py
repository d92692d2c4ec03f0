"""``amdtop --demo`` launches the simulated workers itself and stops, on quit, exactly the ones it launched."""

from __future__ import annotations

import time
from pathlib import Path

from amdtop.model import WorkerState
from amdtop.pipeline import NodePipeline
from amdtop.supervisor import Supervisor
from amdtop.supervisor.owner import SupervisorOwner
from amdtop.telemetry.sim import SimBackend
from tests.gates import PASS
from tui.launch import DemoAutostart


def test_demo_workers_start_busy_and_stop_on_quit(tmp_path: Path) -> None:
    sim = SimBackend()
    sup = Supervisor(
        tmp_path / "none.toml",
        tmp_path,
        gate=PASS,
        topology=sim.topology(),
        demo=True,
        sim=sim,
        grace_s=5,
        demo_port_base=18250,
    )
    # As the dashboard wires it: every call through the supervisor's owner thread.
    control = SupervisorOwner(sup)
    try:
        auto = DemoAutostart(control).start()
        auto.thread.join(timeout=30)
        assert auto.launched == sup.names()
        # The node pipeline, as the dashboard runs it: the demo's load follows the workers' status.
        pipeline = NodePipeline(sim, control, discover=False, demo_load=control.demo_load(), workers_every_s=0.0)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            states = {w.name: w for w in pipeline.tick().workers}
            busy = all(
                w.state is WorkerState.READY and w.engine and (w.engine.running or 0) > 0 for w in states.values()
            )
            if busy:
                break
            time.sleep(0.5)
        assert busy, states  # the background traffic keeps sequences running without any client
        # The simulated GPUs follow the workers: the busy demo node is not idle.
        assert max(s.util_pct or 0 for s in pipeline.tick().snapshot.gpus) > 20
        control.close()  # the dashboard closes first (on unmount); the autostart then stops its workers
        auto.stop()
        assert all(w.pid is None for w in control.status())
    finally:
        for name in sup.names():
            control.stop(name)
        control.shutdown()
