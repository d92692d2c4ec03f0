"""``amdtop`` with no command: open the backend (or the simulated node) and run the dashboard."""

from __future__ import annotations

import argparse
import os
import signal
import threading
from collections.abc import Callable

from amdtop.cli.common import config_path, open_from_args, state_dir
from amdtop.cli.kernel import kernel_monitor
from amdtop.control import WorkerControl
from amdtop.errors import NoGpuFound
from amdtop.supervisor import Supervisor
from amdtop.telemetry.base import TelemetryBackend
from amdtop.telemetry.sim import SimBackend

NO_GPU_BANNER = "No GPU found — showing a simulated 8x MI300X node (--demo)"


def open_control(args: argparse.Namespace, backend: TelemetryBackend, demo: bool) -> tuple[Supervisor | None, str | None]:
    """(supervisor, note): the supervisor over the profiles (the demo's on the simulated node), or why there is none."""
    cfg = config_path(args)
    if not (demo or cfg.exists()):
        return None, None
    try:
        sim = backend if isinstance(backend, SimBackend) else None
        vendor = "NVIDIA" if backend.name == "nvml" else "AMD"
        sup = Supervisor(
            cfg,
            state_dir(args),
            topology=backend.topology(),
            vendor=vendor,
            demo=demo,
            sim=sim,
            readonly=bool(args.readonly),
        )
    except Exception as exc:  # a broken profile must not keep the dashboard from opening
        return None, f"supervisor: {exc}"
    note = None
    if demo:
        from amdtop.supervisor.demo import demo_pinning_note

        note = demo_pinning_note([sup.profile(n) for n in sup.names()], sup.topology, os.environ)
    return sup, note


def open_backend_or_sim(args: argparse.Namespace) -> tuple[TelemetryBackend, str | None, bool]:
    """(backend, banner, demo): the backend the arguments ask for, or the simulated node when no GPU is found."""
    try:
        return open_from_args(args), None, bool(args.demo)
    except NoGpuFound:
        return SimBackend(seed=args.seed, partition=args.demo_partition), NO_GPU_BANNER, True


class DemoAutostart:
    """Launches the stopped demo workers in the background (the demo should show a busy node at once) and stops,
    on the way out, exactly the ones it launched."""

    def __init__(self, control: WorkerControl, on_failure: Callable[[str, str], None] | None = None) -> None:
        self.control = control
        self.on_failure = on_failure
        """Called (from the autostart thread) with the worker's name and the launch's one-line error."""
        self.launched: list[str] = []
        self.failed: dict[str, str] = {}
        self._cancel = threading.Event()
        self.thread = threading.Thread(target=self._go, name="demo-autostart", daemon=True)

    def start(self) -> DemoAutostart:
        self.thread.start()
        return self

    def _go(self) -> None:
        for st in self.control.status():
            if self._cancel.is_set():
                return
            if st.pid is None:
                try:
                    self.control.launch(st.name)
                    self.launched.append(st.name)
                except Exception as exc:  # a busy port, a missing command: the dashboard opens and says so
                    self.failed[st.name] = f"launch {st.name}: {exc}"
                    if self.on_failure is not None:
                        self.on_failure(st.name, self.failed[st.name])

    def stop(self) -> None:
        """Stop the demo workers launched so far, side by side (a lost terminal leaves seconds, not minutes)."""
        self._cancel.set()
        self.thread.join(timeout=10)
        stoppers = [threading.Thread(target=self._stop_one, args=(name,), daemon=True) for name in self.launched]
        for t in stoppers:
            t.start()
        for t in stoppers:
            t.join(timeout=15)

    def _stop_one(self, name: str) -> None:
        try:
            self.control.stop(name)
        except Exception:
            pass


class TerminalLoss:
    """What to do when the terminal goes away (SSH drop, tmux kill): clean up and leave at once.

    Textual's own shutdown writes to the terminal to restore it; on a hung-up tty its writer thread dies and the
    shutdown blocks forever on a full queue (seen with textual 8.2.8), so nothing is restored: there is nothing left
    to restore.
    """

    def __init__(self, cleanup: Callable[[], None]) -> None:
        self._cleanup = cleanup
        self._once = threading.Lock()

    def lost(self) -> None:
        if not self._once.acquire(blocking=False):
            return
        try:
            self._cleanup()
        finally:
            os._exit(0)

    def on_sighup(self, _sig: int, _frame: object) -> None:
        # Signal handlers must return quickly: the cleanup stops processes and waits for them.
        threading.Thread(target=self.lost, name="terminal-lost", daemon=True).start()


def run(args: argparse.Namespace) -> int:
    """Run the dashboard; returns the exit status."""
    from tui.app import AmdtopApp

    backend, banner, demo = open_backend_or_sim(args)
    control, note = open_control(args, backend, demo)
    if note:
        banner = f"{banner} · {note}" if banner else note
    app = AmdtopApp(
        backend,
        workers=control,
        control=control,
        demo_load=control.demo_load() if control is not None else None,
        interval=float(args.interval),
        readonly=bool(args.readonly),
        banner=banner,
        state_dir=state_dir(args),
        watch_tty=True,
        follow_logs=True,
        # Real vLLM processes have nothing to do with the simulated GPUs: discover only on real backends.
        discover=not isinstance(backend, SimBackend),
        kernel_faults=kernel_monitor(args, backend, headless=False),
        config_path=config_path(args),
    )
    if control is not None:
        from pathlib import Path

        from tui.gate_dialog import frame_gate

        control.gate = frame_gate(app, backend.topology(), Path(args.sysfs_root))
    autostart = None
    if demo and isinstance(backend, SimBackend) and not args.readonly and control is not None:
        autostart = DemoAutostart(control, on_failure=app.failures.put).start()
    loss = TerminalLoss(autostart.stop if autostart is not None else lambda: None)
    app.on_terminal_lost = loss.lost
    # A closed terminal sends SIGHUP, whose default action kills us before the demo workers are stopped (real
    # workers are never stopped on exit). An inherited blocked mask would hide it: unblock it.
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGHUP})
    previous = signal.signal(signal.SIGHUP, loss.on_sighup)
    # SIGTERM (kill, a job runner, a benchmark) likewise: the demo's workers held their ports after it, and the next
    # `amdtop --demo` found every launch refused.
    previous_term = signal.signal(signal.SIGTERM, loss.on_sighup) if autostart is not None else None
    try:
        result = app.run()
    finally:
        signal.signal(signal.SIGHUP, previous)
        if previous_term is not None:
            signal.signal(signal.SIGTERM, previous_term)
        if autostart is not None:
            autostart.stop()
    return int(result or 0)
