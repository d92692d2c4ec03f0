"""``amdtop`` with no command: open the backend (or the simulated node) and run the dashboard."""

from __future__ import annotations

import argparse
import time
from typing import Any

from amdtop.cli.common import config_path, open_from_args, state_dir
from amdtop.errors import NoGpuFound
from amdtop.telemetry.base import TelemetryBackend
from amdtop.telemetry.sim import SimBackend

NO_GPU_BANNER = "No GPU found — showing a simulated 8x MI300X node (--demo)"


def open_control(args: argparse.Namespace, backend: TelemetryBackend, demo: bool) -> tuple[Any, Any, str | None]:
    """(worker source, controller, note): the supervisor when it is available, demo workers on the sim node."""
    try:
        from amdtop.supervisor import Supervisor
    except ImportError:
        Supervisor = None  # noqa: N806 - mirrors the class name
    note = None
    if Supervisor is not None:
        cfg = config_path(args)
        if demo or cfg.exists():
            try:
                sim = backend if isinstance(backend, SimBackend) else None
                vendor = "NVIDIA" if getattr(backend, "name", "") == "nvml" else "AMD"
                sup = Supervisor(
                    cfg,
                    state_dir(args),
                    topology=backend.topology(),
                    vendor=vendor,
                    demo=demo,
                    sim=sim,
                    readonly=bool(args.readonly),
                )
                return sup, sup, None
            except Exception as exc:  # a broken profile must not keep the dashboard from opening
                note = f"supervisor: {exc}"
    if demo and isinstance(backend, SimBackend):
        from tui.demo_workers import DemoWorkers

        workers = DemoWorkers(backend, clock=time.time)
        return workers, workers, note
    return None, None, note


def open_backend_or_sim(args: argparse.Namespace) -> tuple[TelemetryBackend, str | None, bool]:
    """(backend, banner, demo): the backend the arguments ask for, or the simulated node when no GPU is found."""
    try:
        return open_from_args(args), None, bool(args.demo)
    except NoGpuFound:
        return SimBackend(seed=getattr(args, "seed", 0)), NO_GPU_BANNER, True


def run(args: argparse.Namespace) -> int:
    """Run the dashboard; returns the exit status."""
    from tui.app import AmdtopApp

    backend, banner, demo = open_backend_or_sim(args)
    source, control, note = open_control(args, backend, demo)
    if note:
        banner = f"{banner} · {note}" if banner else note
    app = AmdtopApp(
        backend,
        workers=source,
        control=control,
        interval=float(args.interval),
        readonly=bool(args.readonly),
        banner=banner,
        state_dir=state_dir(args),
        watch_tty=True,
        follow_logs=True,
        # Real vLLM processes have nothing to do with the simulated GPUs: discover only on real backends.
        discover=not isinstance(backend, SimBackend),
    )
    result = app.run()
    return int(result or 0)
