"""Opening the node from the arguments: the backend, the supervisor (the only place one is built), the log and
kernel-fault monitors, the pipeline and its tick loop.

Every command that watches the node goes through :func:`open_node`: the dashboard (``ui=True``: the simulated node
when no GPU is found, the supervisor under its owner thread), ``snapshot``, ``export``, ``probe`` and ``ramp`` (read
only). ``amdtop workers`` builds its supervisor through :func:`open_supervisor` as well.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from amdtop.audit.auditor import Auditor, profile_lookup
from amdtop.cli.common import config_path, open_from_args, state_dir
from amdtop.cli.kernel import kernel_monitor
from amdtop.errors import NoGpuFound
from amdtop.kernel.bus_check import raise_if_on_bus
from amdtop.model import Topology
from amdtop.pipeline.producer import NodePipeline
from amdtop.runtime.loop import NodeRuntime
from amdtop.telemetry.base import TelemetryBackend
from amdtop.telemetry.sim import SimBackend
from amdtop.thresholds import TP_WINDOW_S

if TYPE_CHECKING:
    from amdtop.supervisor.core import Supervisor
    from amdtop.supervisor.owner import SupervisorOwner

NO_GPU_BANNER = "No GPU found — showing a simulated 8x MI300X node (--demo)"


def open_supervisor(
    args: argparse.Namespace,
    topology: Topology,
    *,
    backend: TelemetryBackend | None = None,
    readonly: bool,
    lenient: bool = False,
) -> Supervisor:
    """The supervisor over the profile file (or the demo's) and the state dir the arguments name.

    The vendor (which visibility variable a launch sets) is the GPUs', else the backend's; ``lenient`` keeps a bad
    profile file from stopping status/stop/restart of a running worker (``amdtop workers``).
    """
    # The supervisor (tomlkit, its HTTP probe, the process scans) loads when one is opened: every command and the
    # attached viewer import this module, and the viewer never supervises (~2.5 MiB RSS).
    from amdtop.supervisor.core import Supervisor

    if topology.gpus:
        vendor = topology.gpus[0].vendor
    else:
        vendor = "NVIDIA" if backend is not None and backend.name == "nvml" else "AMD"
    return Supervisor(
        config_path(args),
        state_dir(args),
        topology=topology,
        vendor=vendor,
        demo=bool(args.demo),
        sim=backend if isinstance(backend, SimBackend) else None,
        readonly=readonly,
        lenient=lenient,
    )


@dataclass
class Node:
    """What :func:`open_node` opened; :meth:`close` releases it all (workers keep running)."""

    backend: TelemetryBackend
    pipeline: NodePipeline
    runtime: NodeRuntime
    supervisor: Supervisor | None = None
    control: SupervisorOwner | None = None
    """The supervisor's owner thread (every call to the supervisor goes through it)."""
    demo: bool = False
    """The simulated node stands in (``--demo``, or no GPU found for the dashboard)."""
    notes: list[str] = field(default_factory=list)
    """Banner lines: why the node is simulated, why workers are left out, where the demo is not pinned."""

    def close(self) -> None:
        """Stop the tick loop, close the monitors, the supervisor's HTTP client and the backend."""
        self.runtime.stop()
        self.pipeline.close()
        if self.control is not None:
            self.control.close()
        elif self.supervisor is not None:
            self.supervisor.close()
        self.backend.close()


def _backend(args: argparse.Namespace, ui: bool) -> tuple[TelemetryBackend, bool, list[str]]:
    try:
        return open_from_args(args), bool(args.demo), []
    except NoGpuFound:
        # GPUs on the PCI bus that no backend shows failed to come up: say so (GpusFailedInit), never the demo
        sysfs = Path(getattr(args, "sysfs_root", None) or "/sys")
        kernel_log = getattr(args, "kernel_log", None)
        raise_if_on_bus(sysfs, None if kernel_log is None else Path(kernel_log))
        if not ui:
            raise
        return SimBackend(seed=args.seed, partition=args.demo_partition), True, [NO_GPU_BANNER]


def open_node(
    args: argparse.Namespace,
    *,
    ui: bool = False,
    follow_logs: bool = True,
    window_s: float = TP_WINDOW_S,
    kernel: bool = True,
    interval: float | None = None,
) -> Node:
    """Open the node the arguments name and its pipeline; the tick loop is not started (call ``runtime.start()``).

    ``ui``: the dashboard's node (simulated when no GPU is found; the supervisor writable unless ``--readonly``, and
    its failure a banner note); else a headless command's (a read-only supervisor, its failure a stderr warning).
    """
    backend, demo, notes = _backend(args, ui)
    try:
        sup = None
        if demo or config_path(args).exists():
            # In the dashboard the demo profiles stand for the simulated node, also when it came from no GPU found.
            if ui and demo and not args.demo:
                args = argparse.Namespace(**{**vars(args), "demo": True})
            try:
                # Lenient: a broken profile file never hides or strands running workers (listed from their launch
                # records, read, stoppable); launch and retune refuse with the file's error, shown here once.
                sup = open_supervisor(
                    args, backend.topology(), backend=backend, readonly=bool(args.readonly) if ui else True,
                    lenient=True,
                )  # fmt: skip
                problem: Exception | None = sup.config_error
            except Exception as exc:  # a broken profile must not keep the GPUs from being shown
                problem = exc
            if problem is not None:
                if ui:
                    notes.append(f"supervisor: {problem}")
                else:
                    sys.stderr.write(f"amdtop: warning: profile file: {problem} (running workers are still shown)\n")
        if sup is not None and demo and ui:
            from amdtop.supervisor.demo import demo_pinning_note

            note = demo_pinning_note([sup.profile(n) for n in sup.names()], sup.topology, os.environ)
            if note:
                notes.append(note)
        from amdtop.supervisor.owner import SupervisorOwner  # lazy: see open_supervisor

        control = SupervisorOwner(sup) if sup is not None else None
        pipeline = NodePipeline(
            backend,
            control,
            # The simulated node has no real processes: discovering host vLLM servers would mix real and fake workers.
            discover=backend.name != "sim",
            follow_logs=follow_logs,
            state_dir=state_dir(args),
            demo_load=sup.demo_load() if sup is not None else None,
            window_s=window_s,
            kernel=kernel_monitor(args, backend, headless=not ui) if kernel else None,
            auditor=Auditor(sys_root=Path(args.sysfs_root), profiles=profile_lookup(control)),
        )
    except BaseException:
        backend.close()
        raise
    runtime = NodeRuntime(pipeline, float(args.interval if interval is None else interval))
    return Node(backend, pipeline, runtime, sup, control, demo, notes)


def cpu_only_topology(args: argparse.Namespace) -> Topology:
    """The topology of a host without GPUs (CPU workers, ``gpus = []``): its NUMA nodes alone."""
    from amdtop.telemetry.numa import read_numa_nodes

    return Topology((), (), read_numa_nodes(Path(args.sysfs_root)))
