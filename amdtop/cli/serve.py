"""``amdtop serve`` (the node runtime headless, viewers attach over a Unix socket) and ``amdtop web`` (the dashboard
in a browser: its server lives with the UI, in ``tui.web``)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from amdtop import heap, runtime
from amdtop.cli.common import add_listen, node_spec, stop_on_signals
from amdtop.exporter import DEFAULT_LISTEN, Exporter, parse_listen, runtime_exporter
from amdtop.exporter.server import is_loopback
from amdtop.serve.server import Serve

WEB_LISTEN = "127.0.0.1:8765"


def register(sub: Any, parent: argparse.ArgumentParser) -> None:
    """Add the ``serve`` and ``web`` commands."""
    p = sub.add_parser("serve", parents=[parent], help="run the node runtime headless; amdtop attaches to it")
    add_listen(p, DEFAULT_LISTEN, "address of the Prometheus exporter")
    p.set_defaults(func=run_serve)
    w = sub.add_parser("web", parents=[parent], help="the dashboard in a browser (attached to amdtop serve)")
    add_listen(w, WEB_LISTEN, "address of the web server")
    w.add_argument(
        "--allow-control", action="store_true", help="let browser viewers launch/stop/retune/ramp (default read-only)"
    )
    # The dashboard callable of the console entry point runs it: the web server belongs to the UI package.
    w.set_defaults(func=None, ui_command="web")


def run_serve(args: argparse.Namespace) -> int:
    """Serve until SIGINT/SIGTERM."""
    host, _ = parse_listen(args.listen)  # bad input fails before any device is opened
    spec = node_spec(args)
    service = runtime.open(spec, ui=True)
    serve: Serve | None = None
    exporter: Exporter | None = None
    try:
        serve = Serve(service, spec.state_dir)
        serve.bind()  # a second serve for the same state dir stops here, before polling anything
        try:
            service.runtime.tick()
        except Exception as exc:
            sys.stderr.write(f"amdtop: warning: first poll failed: {exc}\n")
        exporter = runtime_exporter(service, args.listen)
        exporter.start()
        if not is_loopback(host):
            sys.stderr.write(f"amdtop: warning: exporter on {host}, not loopback: anyone who can reach it reads it\n")
        serve.start()
        service.runtime.start()
        service.start_demo(_warn_launch)
        for note in service.notes:
            sys.stderr.write(f"amdtop: {note}\n")
        # A serve started from an SSH session outlives it: that is what it is for (ramps survive a dropped session).
        wait = stop_on_signals(ignore_hangup=True)
        heap.settle()  # start-up's objects out of every later full collection (amdtop/heap.py)
        sys.stderr.write(f"amdtop: serving {serve.path} (metrics at {exporter.url}; Ctrl-C stops)\n")
        sys.stderr.flush()
        wait()
    finally:
        if serve is not None:
            serve.close(keep_lock=True)
        if exporter is not None:
            exporter.stop()
        service.shutdown()
        if serve is not None:
            serve.release_lock()
    return 0


def _warn_launch(_name: str, line: str) -> None:
    sys.stderr.write(f"amdtop: warning: {line}\n")
