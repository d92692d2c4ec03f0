"""``amdtop`` with no command: open the backend (or the simulated node) and run the dashboard."""

from __future__ import annotations

import argparse
import os
import signal
import threading
from collections.abc import Callable

from amdtop.cli.common import config_path, state_dir
from amdtop.control import WorkerControl
from amdtop.errors import AmdtopError
from amdtop.pcibus import GpusFailedInit
from amdtop.runtime.node import NO_GPU_BANNER, open_node
from amdtop.serve.client import attach
from amdtop.telemetry.sim import SimBackend

__all__ = ["NO_GPU_BANNER", "DemoAutostart", "TerminalLoss", "run"]


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

    if not args.no_attach:
        # A serve for this state dir already polls the node: attach to it instead of opening a second poller.
        client = attach(state_dir(args), readonly=bool(args.readonly))
        if client is not None:
            from tui.attached import run_attached

            return run_attached(args, client)
    if args.attach_only:
        message = f"no amdtop serve runs for {state_dir(args)}: start `amdtop serve` first"
        if os.environ.get("TEXTUAL_DRIVER") or os.isatty(1):
            # A browser tab (textual-serve's web driver) or a terminal: say it on the screen, where it is read.
            from tui.no_serve import NoServeApp

            NoServeApp(message).run()
            return 1
        raise AmdtopError(message)
    try:
        node = open_node(args, ui=True)
    except GpusFailedInit as exc:
        from tui.failed_gpus import FailedGpusApp

        return int(FailedGpusApp(exc.incident).run() or 1)
    backend, control = node.backend, node.control
    app = AmdtopApp(
        backend,
        workers=control,
        control=control,
        readonly=bool(args.readonly),
        banner=" · ".join(node.notes) or None,
        state_dir=state_dir(args),
        watch_tty=True,
        runtime=node.runtime,
        config_path=config_path(args),
    )
    if node.supervisor is not None and control is not None:
        from pathlib import Path

        from tui.gate_dialog import frame_gate

        # Set before any command is queued to the owner thread (the demo's autostart starts below).
        node.supervisor.gate = frame_gate(app, backend.topology(), Path(args.sysfs_root))
    demo = node.demo
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
