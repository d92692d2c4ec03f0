"""``amdtop export``: serve the node's metrics to Prometheus until SIGINT/SIGTERM."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from types import FrameType
from typing import Any

from amdtop.cli.common import config_path, open_from_args, state_dir
from amdtop.exporter import DEFAULT_LISTEN, Exporter, parse_listen
from amdtop.exporter.server import is_loopback
from amdtop.exporter.sources import NodeProvider, optional_module
from amdtop.telemetry.base import TelemetryBackend


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


def readonly_supervisor(args: argparse.Namespace, backend: TelemetryBackend) -> Any:
    """A read-only supervisor over the configured profiles, when both exist."""
    module = optional_module("amdtop.supervisor")
    config = config_path(args)
    if module is None or not hasattr(module, "Supervisor") or (not config.exists() and not args.demo):
        return None
    topology = backend.topology()
    vendor = topology.gpus[0].vendor if topology.gpus else "AMD"
    try:
        return module.Supervisor(
            config,
            state_dir(args),
            topology=topology,
            vendor=vendor,
            demo=bool(args.demo),
            sim=backend if args.demo else None,
            readonly=True,
        )
    except Exception as exc:  # the GPU metrics are still worth serving without workers
        sys.stderr.write(f"amdtop: warning: workers not exported: {exc}\n")
        return None


def run_export(args: argparse.Namespace) -> int:
    """Serve ``/metrics`` until interrupted."""
    host, _ = parse_listen(args.listen)  # bad input fails before any device is opened
    backend = open_from_args(args)
    try:
        # The simulated node has no real processes: discovering host vLLM servers would mix real and fake workers.
        provider = NodeProvider(
            backend, state_dir=state_dir(args), supervisor=readonly_supervisor(args, backend), discover=not args.demo
        )
        exporter = Exporter(provider, args.listen, min_interval=args.interval)
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
    finally:
        backend.close()
    return 0
