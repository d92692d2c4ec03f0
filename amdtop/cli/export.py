"""``amdtop export``: serve the node's metrics to Prometheus until SIGINT/SIGTERM."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from amdtop import runtime
from amdtop.cli.common import add_listen, node_spec, stop_on_signals
from amdtop.exporter import DEFAULT_LISTEN, parse_listen, runtime_exporter
from amdtop.exporter.server import is_loopback


def register(sub: Any, parent: argparse.ArgumentParser) -> None:
    """Add the ``export`` command."""
    p = sub.add_parser("export", parents=[parent], help="serve Prometheus metrics of this node")
    add_listen(p, DEFAULT_LISTEN, "address to serve /metrics on")
    p.set_defaults(func=run_export)


def run_export(args: argparse.Namespace) -> int:
    """Serve ``/metrics`` until interrupted."""
    host, _ = parse_listen(args.listen)  # bad input fails before any device is opened
    service = runtime.open(node_spec(args))
    try:
        # The runtime ticks on its own clock (every --interval, whoever scrapes): the pipeline's windows hold the
        # samples they are sized for, and a scrape serves the newest frame without a device call of its own.
        try:
            service.runtime.tick()
        except Exception as exc:  # served as 500 "no sample yet" until a tick works; the loop keeps trying
            sys.stderr.write(f"amdtop: warning: first poll failed: {exc}\n")
        exporter = runtime_exporter(service.runtime, args.listen)
        exporter.start()
        service.runtime.start()
        if not is_loopback(host):
            sys.stderr.write(f"amdtop: warning: serving on {host}, not loopback: anyone who can reach it reads it\n")
        wait = stop_on_signals()
        sys.stderr.write(f"amdtop: serving {service.backend_name} metrics at {exporter.url} (Ctrl-C stops)\n")
        sys.stderr.flush()
        try:
            wait()
        finally:
            exporter.stop()
    finally:
        service.close()
    return 0
