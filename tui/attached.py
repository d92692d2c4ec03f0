"""The dashboard attached to an ``amdtop serve``: the serve's frames, its supervisor and its ramps.

The app is the same :class:`tui.app.AmdtopApp`; only its runtime (frames from the socket), its control (requests
over the socket) and the ramp screen's runner (the serve's) differ. When the serve goes away the viewer says so and
exits with status 1 (it does not fall back to polling in-process: a second poller beside a restarted serve, or a
browser tab that quietly starts polling, is what attaching exists to avoid; run ``amdtop`` again).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from amdtop.cli.common import state_dir
from amdtop.ramp import RampConfig
from amdtop.serve.client import RemoteService, ServeClient

if TYPE_CHECKING:
    from tui.app import AmdtopApp
    from tui.screens.ramp import RampScreen

FIRST_FRAME_WAIT_S = 10.0


class _NoBackend:
    """The serve holds the backend; the viewer has nothing to close."""

    name = "serve"

    def close(self) -> None:
        pass


class RemoteRamp:
    """The ramp screen's runner when attached: the serve runs the ramp; progress arrives as ramp messages."""

    def __init__(self, client: ServeClient, worker: str, gpus: tuple[int, ...] | None) -> None:
        self.client = client
        self.worker = worker
        self.gpus = gpus
        self._screen: RampScreen | None = None
        client.on_ramp(self._update)

    def bind(self, screen: RampScreen) -> None:
        self._screen = screen

    def start(self, config: RampConfig) -> None:
        settings = {k: v for k, v in asdict(config).items() if k != "url"}
        fut = self.client.call_async("ramp_start", self.worker, config.url, self.gpus, settings)
        fut.add_done_callback(self._started)

    def _started(self, fut: Any) -> None:
        screen = self._screen
        exc = fut.exception()
        if screen is not None and exc is not None:
            screen.post_message(screen.Failed(str(exc)))

    def abort(self) -> None:
        self.client.call_async("ramp_abort", self.worker)

    def current(self) -> tuple[dict[str, Any], str, bool] | None:
        """The serve's newest document of this worker's ramp (status, still running), if one ran."""
        return self.client.ramps.get(self.worker)

    def _update(self, worker: str, doc: dict[str, Any], status: str, running: bool) -> None:
        screen = self._screen
        if worker == self.worker and screen is not None:
            screen.post_message(screen.Progress(doc, status, running=running))


def attached_app(client: ServeClient, directory: Path, *, readonly: bool, watch_tty: bool) -> AmdtopApp:
    """The dashboard over ``client``'s serve (read-only when the viewer or the serve is)."""
    from tui.app import AmdtopApp

    readonly = readonly or bool(client.hello.get("readonly"))
    service = RemoteService(client, readonly=readonly)
    control = None if readonly else service
    banner = " · ".join([f"attached to amdtop serve (pid {client.pid})", *client.hello.get("notes", ())])
    app = AmdtopApp(
        _NoBackend(),  # type: ignore[arg-type]
        workers=control,
        control=control,
        readonly=readonly,
        banner=banner,
        state_dir=directory,
        watch_tty=watch_tty,
        runtime=service.runtime,  # type: ignore[arg-type]
    )
    app.serve_client = client
    app.serve_gone = []

    def on_gone(reason: str) -> None:
        if not app.is_running:
            return  # the viewer left first: the connection closing is ours
        app.serve_gone.append(reason)
        try:
            app.call_from_thread(app.exit, 1)
        except RuntimeError:
            pass  # the app stopped in between

    client.on_gone(on_gone)
    return app


def run_attached(args: argparse.Namespace, client: ServeClient) -> int:
    """Run the dashboard over ``client``'s serve; returns the exit status."""
    client.wait_first_frame(FIRST_FRAME_WAIT_S)
    app = attached_app(client, state_dir(args), readonly=bool(args.readonly), watch_tty=not args.attach_only)
    if client.gone is not None:  # gone before the app ran (its callback only stops a running app)
        client.close()
        sys.stderr.write(f"amdtop: {client.gone}; the viewer exits\n")
        return 1
    try:
        result = app.run()
    finally:
        client.close()
    if app.serve_gone:
        sys.stderr.write(f"amdtop: {app.serve_gone[0]}; the viewer exits (run amdtop again: it polls in-process when no serve runs)\n")
        return 1
    return int(result or 0)
