"""``amdtop export``: serve the node's metrics to Prometheus until SIGINT/SIGTERM."""

from __future__ import annotations

import argparse
import os
import signal
import sys
from typing import Any

from amdtop import runtime
from amdtop.cli.common import add_listen, node_spec, stop_on_signals
from amdtop.cli.served import serve_of
from amdtop.errors import AmdtopError
from amdtop.exporter import DEFAULT_LISTEN, parse_listen, runtime_exporter
from amdtop.exporter.server import is_loopback
from amdtop.pipeline.frame import NodeFrame
from amdtop.serve.client import ServeClient


def register(sub: Any, parent: argparse.ArgumentParser) -> None:
    """Add the ``export`` command."""
    p = sub.add_parser("export", parents=[parent], help="serve Prometheus metrics of this node")
    add_listen(p, DEFAULT_LISTEN, "address to serve /metrics on")
    p.set_defaults(func=run_export)


def run_export(args: argparse.Namespace) -> int:
    """Serve ``/metrics`` until interrupted."""
    host, _ = parse_listen(args.listen)  # bad input fails before any device is opened
    client = serve_of(args)
    if client is not None:
        return _export_served(client, args.listen, host)
    service = runtime.open(node_spec(args))
    try:
        # The runtime ticks on its own clock (every --interval, whoever scrapes): the pipeline's windows hold the
        # samples they are sized for, and a scrape serves the newest frame without a device call of its own.
        try:
            service.runtime.tick()
        except Exception as exc:  # served as 500 "no sample yet" until a tick works; the loop keeps trying
            sys.stderr.write(f"amdtop: warning: first poll failed: {exc}\n")
        exporter = runtime_exporter(service, args.listen)
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
        service.shutdown()
    return 0


class _ServedNode:
    """The serve's frames as the exporter reads a runtime's (:class:`~amdtop.exporter.server.PolledNode`): the serve
    polls, every --interval; ``polls`` counts the frames it sent here."""

    def __init__(self, client: ServeClient) -> None:
        self.client = client

    @property
    def polls(self) -> int:
        return self.client.frames

    @property
    def last_duration_s(self) -> float:
        return 0.0

    def latest(self) -> NodeFrame:
        frame = self.client.frame
        if frame is None:
            raise RuntimeError("no sample yet")
        return frame


def _export_served(client: ServeClient, listen: str, host: str) -> int:
    """Serve ``/metrics`` of the serve's frames (no second poller of the node) until interrupted or the serve goes."""
    exporter = runtime_exporter(_ServedNode(client), listen)
    try:
        exporter.start()
        if not is_loopback(host):
            sys.stderr.write(f"amdtop: warning: serving on {host}, not loopback: anyone who can reach it reads it\n")
        wait = stop_on_signals()
        client.on_gone(lambda _why: os.kill(os.getpid(), signal.SIGTERM))  # the serve stopped: so does this
        sys.stderr.write(f"amdtop: serving the metrics of amdtop serve (pid {client.pid}) at {exporter.url} (Ctrl-C stops)\n")
        sys.stderr.flush()
        wait()
    finally:
        exporter.stop()
        client.close()
    if client.gone is not None:
        raise AmdtopError(client.gone)
    return 0
