"""``amdtop`` with no command: open the backend (or the simulated node) and run the dashboard."""

from __future__ import annotations

import argparse
import os
import signal
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from amdtop import runtime
from amdtop.cli.common import node_spec
from amdtop.errors import AmdtopError
from amdtop.pcibus import GpusFailedInit
from amdtop.runtime.autostart import DemoAutostart
from amdtop.runtime.node import NO_GPU_BANNER
from amdtop.serve.client import ServeNotAnswering, attach
from tui.sigterm import exit_on_sigterm

if TYPE_CHECKING:
    pass

__all__ = ["NO_GPU_BANNER", "DemoAutostart", "TerminalLoss", "run"]


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


def _no_serve(message: str, attach_only: bool) -> int:
    """Say why no dashboard opens: on the screen in a browser tab (textual-serve's web driver) or a terminal a tab
    runs in, where it is read; otherwise as the one error line."""
    if attach_only and (os.environ.get("TEXTUAL_DRIVER") or os.isatty(1)):
        from tui.no_serve import NoServeApp

        NoServeApp(message).run()
        return 1
    raise AmdtopError(message)


def run(args: argparse.Namespace) -> int:
    """Run the dashboard; returns the exit status."""
    from tui.app import AmdtopApp

    spec = node_spec(args)
    if not args.no_attach:
        # A serve for this state dir already polls the node: attach to it instead of opening a second poller.
        try:
            client = attach(spec.state_dir, readonly=spec.readonly, reader=False)  # the dashboard's loop reads it
        except ServeNotAnswering as exc:  # a serve lives (stopped, busy): never a second poller beside it
            return _no_serve(str(exc), args.attach_only)
        if client is not None:
            from tui.attached import run_attached

            return run_attached(args, client)
    if args.attach_only:
        return _no_serve(f"no amdtop serve runs for {spec.state_dir}: start `amdtop serve` first", True)
    try:
        service = runtime.open(spec, ui=True)
    except GpusFailedInit as exc:
        from tui.failed_gpus import FailedGpusApp

        return int(FailedGpusApp(exc.incident).run() or 1)
    app = AmdtopApp(
        service,
        interval=service.runtime.interval,
        banner=" · ".join(service.notes) or None,
        state_dir=spec.state_dir,
        watch_tty=True,
        config_path=spec.config,
        settle_heap=True,
    )
    autostart = service.start_demo(app.failures.put)
    loss = TerminalLoss(service.stop_demo)
    app.on_terminal_lost = loss.lost
    # A closed terminal sends SIGHUP, whose default action kills us before the demo workers are stopped (real
    # workers are never stopped on exit). An inherited blocked mask would hide it: unblock it.
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGHUP})
    previous = signal.signal(signal.SIGHUP, loss.on_sighup)
    # SIGTERM (kill, a job runner, a benchmark): the app ends as on `q`, the terminal restored, and the finally below
    # stops the demo's workers (they held their ports after a kill, and the next `amdtop --demo` found every launch
    # refused); the hard way, should the shutdown hang, stops them too.
    restore_term = exit_on_sigterm(app, loss.lost if autostart is not None else None)
    # Polling starts now: the dashboard draws the newest frame when it mounts and every one after.
    service.runtime.start()
    try:
        result = app.run()
    finally:
        signal.signal(signal.SIGHUP, previous)
        restore_term()
        # Its ramps aborted; the tick loop, the demo's workers, the monitors and the backend closed; real workers keep
        # running.
        service.shutdown()
    return int(result or 0)
