"""``amdtop export``: serve the node's metrics to Prometheus until SIGINT/SIGTERM."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from types import FrameType
from typing import Any

from amdtop.cli.common import open_from_args
from amdtop.cli.node import open_pipeline
from amdtop.exporter import DEFAULT_LISTEN, Exporter, parse_listen
from amdtop.exporter.server import is_loopback


def register(sub: Any, parent: argparse.ArgumentParser) -> None:
    """Add the ``export`` command."""
    p = sub.add_parser("export", parents=[parent], help="serve Prometheus metrics of this node")
    p.add_argument(
        "--listen",
        default=DEFAULT_LISTEN,
        metavar="HOST:PORT",
        help=f"address to serve /metrics on (default {DEFAULT_LISTEN}, loopback only; name another host explicitly)",
    )
    p.set_defaults(func=run_export)


def run_export(args: argparse.Namespace) -> int:
    """Serve ``/metrics`` until interrupted."""
    host, _ = parse_listen(args.listen)  # bad input fails before any device is opened
    backend = open_from_args(args)
    try:
        pipeline, sup = open_pipeline(args, backend)
        exporter = Exporter(pipeline.tick, args.listen, min_interval=args.interval)
        exporter.start()
        if not is_loopback(host):
            sys.stderr.write(f"amdtop: warning: serving on {host}, not loopback: anyone who can reach it reads it\n")
        sys.stderr.write(f"amdtop: serving {backend.name} metrics at {exporter.url} (Ctrl-C stops)\n")
        sys.stderr.flush()
        done = threading.Event()

        def _stop(signum: int, frame: FrameType | None) -> None:
            done.set()

        old = {sig: signal.signal(sig, _stop) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            while not done.wait(0.5):
                pass
        finally:
            for sig, handler in old.items():
                signal.signal(sig, handler)
            exporter.stop()
            pipeline.close()
            if sup is not None:
                sup.close()
    finally:
        backend.close()
    return 0
