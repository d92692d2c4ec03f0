"""The dashboard attached to an ``amdtop serve``: the serve's frames, its supervisor and its ramps.

The app is the same :class:`tui.app.AmdtopApp` over a :class:`~amdtop.serve.client.RemoteService` (frames, controls
and ramps through the socket) instead of the in-process :class:`~amdtop.runtime.service.LocalService`. When the serve goes away the viewer says so and
exits with status 1 (it does not fall back to polling in-process: a second poller beside a restarted serve, or a
browser tab that quietly starts polling, is what attaching exists to avoid; run ``amdtop`` again).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from amdtop.cli.common import state_dir
from amdtop.serve.client import RemoteService, ServeClient
from tui.messages import ServeLeft

if TYPE_CHECKING:
    from tui.app import AmdtopApp

FIRST_FRAME_WAIT_S = 10.0


def attached_app(
    client: ServeClient, directory: Path, *, readonly: bool, watch_tty: bool, settle_heap: bool = False
) -> AmdtopApp:
    """The dashboard over ``client``'s serve (read-only when the viewer or the serve is)."""
    from tui.app import AmdtopApp

    readonly = readonly or bool(client.hello.get("readonly"))
    service = RemoteService(client, readonly=readonly)
    banner = " · ".join([f"attached to amdtop serve (pid {client.pid})", *client.hello.get("notes", ())])
    app = AmdtopApp(
        service,
        interval=client.interval,
        banner=banner,
        state_dir=directory,
        watch_tty=watch_tty,
        settle_heap=settle_heap,
    )

    def on_gone(reason: str) -> None:
        if not app.is_running:
            return  # the viewer left first: the connection closing is ours
        app.serve_gone.append(reason)
        # From the loop's thread (the socket is read there) or a reader thread alike: posting is safe from both.
        app.post_message(ServeLeft())

    client.on_gone(on_gone)
    return app


def run_attached(args: argparse.Namespace, client: ServeClient) -> int:
    """Run the dashboard over ``client``'s serve; returns the exit status."""
    client.wait_first_frame(FIRST_FRAME_WAIT_S)
    app = attached_app(
        client, state_dir(args), readonly=bool(args.readonly), watch_tty=not args.attach_only, settle_heap=True
    )
    if client.gone is not None:  # gone before the app ran (its callback only stops a running app)
        client.close()
        sys.stderr.write(f"amdtop: {client.gone}; the viewer exits\n")
        return 1
    from tui.sigterm import exit_on_sigterm

    restore_term = exit_on_sigterm(app)  # SIGTERM: the viewer leaves as on `q`, the terminal restored
    try:
        result = app.run()
    finally:
        restore_term()
        client.close()  # the viewer's end of the node: the serve's node goes on
    if app.serve_gone:
        sys.stderr.write(f"amdtop: {app.serve_gone[0]}; the viewer exits (run amdtop again: it polls in-process when no serve runs)\n")
        return 1
    return int(result or 0)
