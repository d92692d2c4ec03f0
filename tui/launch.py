"""``amdtop`` with no command: open the backend (or the simulated node) and run the dashboard."""

from __future__ import annotations

import argparse
import signal
import threading
import time
from typing import Any

from amdtop.cli.common import config_path, open_from_args, state_dir
from amdtop.errors import NoGpuFound
from amdtop.telemetry.base import TelemetryBackend
from amdtop.telemetry.sim import SimBackend

NO_GPU_BANNER = "No GPU found — showing a simulated 8x MI300X node (--demo)"


def open_control(args: argparse.Namespace, backend: TelemetryBackend, demo: bool) -> tuple[Any, Any, str | None]:
    """(worker source, controller, note): the supervisor when it is available, demo workers on the sim node."""
    from amdtop.supervisor import Supervisor

    note = None
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


def start_demo_workers(control: Any) -> tuple[threading.Thread, list[str]]:
    """Launch the stopped demo workers in the background (the demo should show a busy node at once).

    Returns the thread and the list it fills with the names it launched, so quitting stops only those.
    """
    launched: list[str] = []

    def _go() -> None:
        for st in control.status():
            if st.pid is None:
                try:
                    control.launch(st.name)
                    launched.append(st.name)
                except Exception:  # a busy port shows as a stopped worker; the dashboard still opens
                    continue

    thread = threading.Thread(target=_go, name="demo-autostart", daemon=True)
    thread.start()
    return thread, launched


def stop_demo_workers(control: Any, thread: threading.Thread, launched: list[str]) -> None:
    """Stop the demo workers this session launched (simulated servers should not outlive the demo)."""
    thread.join(timeout=10)
    for name in launched:
        try:
            control.stop(name)
        except Exception:
            continue


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
    autostart = None
    if demo and isinstance(backend, SimBackend) and not args.readonly and hasattr(control, "launch"):
        autostart = start_demo_workers(control)
    # A closed terminal (SSH drop, tmux kill) sends SIGHUP, whose default action kills us before any cleanup:
    # exit the app instead so the demo workers it launched are stopped (real workers are never stopped on exit).
    previous = signal.signal(signal.SIGHUP, lambda _sig, _frame: app.exit())
    try:
        result = app.run()
    finally:
        signal.signal(signal.SIGHUP, previous)
        if autostart is not None:
            stop_demo_workers(control, *autostart)
    return int(result or 0)
