"""The node pipeline as the headless commands open it: backend, read-only supervisor, discovery, logs."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from amdtop.audit.auditor import Auditor, profile_lookup
from amdtop.cli.common import config_path, state_dir
from amdtop.cli.kernel import kernel_monitor
from amdtop.pipeline import NodePipeline
from amdtop.supervisor import Supervisor
from amdtop.telemetry.base import TelemetryBackend
from amdtop.telemetry.sim import SimBackend
from amdtop.thresholds import TP_WINDOW_S


def readonly_supervisor(args: argparse.Namespace, backend: TelemetryBackend) -> Supervisor | None:
    """A read-only supervisor over the configured profiles (or the demo's), when there are any."""
    config = config_path(args)
    if not config.exists() and not args.demo:
        return None
    topology = backend.topology()
    vendor = topology.gpus[0].vendor if topology.gpus else "AMD"
    try:
        return Supervisor(
            config,
            state_dir(args),
            topology=topology,
            vendor=vendor,
            demo=bool(args.demo),
            sim=backend if isinstance(backend, SimBackend) else None,
            readonly=True,
        )
    except Exception as exc:  # the GPU metrics are still worth showing without workers
        sys.stderr.write(f"amdtop: warning: workers left out: {exc}\n")
        return None


def open_pipeline(
    args: argparse.Namespace, backend: TelemetryBackend, *, follow_logs: bool = True, window_s: float = TP_WINDOW_S
) -> tuple[NodePipeline, Supervisor | None]:
    """The pipeline the TUI would run, read-only; the caller closes the supervisor (if any) and the pipeline."""
    sup = readonly_supervisor(args, backend)
    pipeline = NodePipeline(
        backend,
        sup,
        # The simulated node has no real processes: discovering host vLLM servers would mix real and fake workers.
        discover=backend.name != "sim",
        follow_logs=follow_logs,
        state_dir=state_dir(args),
        demo_load=sup.demo_load() if sup is not None else None,
        window_s=window_s,
        kernel=kernel_monitor(args, backend),
        auditor=Auditor(sys_root=Path(args.sysfs_root), profiles=profile_lookup(sup)),
    )
    return pipeline, sup
