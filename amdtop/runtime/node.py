"""Opening the node from a :class:`~amdtop.runtime.spec.NodeSpec`: the backend, the supervisor (the only place one is
built) with its launch gate, the log and kernel-fault monitors, the pipeline, its tick loop and the demo's autostart.

Every command that watches the node goes through :func:`open_node` (by :func:`amdtop.runtime.open`, which wraps the
node in its service): the dashboard and ``amdtop serve`` (``ui=True``: the simulated node when no GPU is found, the
supervisor under its owner thread, gated on a frame ticked for the launch), ``snapshot``, ``export``, ``probe`` and
``ramp`` (read only), and ``amdtop workers`` with no serve running (``supervise=True``: its own supervisor, writable).
Every supervisor gets its gate as a constructor argument.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, cast

from amdtop.audit.auditor import Auditor, profile_lookup
from amdtop.control import DemoLoad
from amdtop.errors import NoGpuFound
from amdtop.logread.kernel.bus_check import raise_if_on_bus
from amdtop.model import Topology
from amdtop.pipeline.producer import NodePipeline
from amdtop.runtime.autostart import DemoAutostart, FailureSink
from amdtop.runtime.gate import frame_gate
from amdtop.runtime.kernel import kernel_monitor
from amdtop.runtime.loop import NodeRuntime
from amdtop.runtime.spec import NodeSpec
from amdtop.telemetry.base import TelemetryBackend
from amdtop.telemetry.sim import SimBackend
from amdtop.thresholds import PROCESSES_EVERY_S, TP_WINDOW_S

if TYPE_CHECKING:
    from amdtop.audit.gate import LaunchGate
    from amdtop.gpuprocs import ProcessHost
    from amdtop.logread.kernel.monitor import KernelFaultMonitor
    from amdtop.logread.rccl.monitor import LogMonitor
    from amdtop.pipeline import WorkerSource
    from amdtop.supervisor.core import Supervisor
    from amdtop.supervisor.owner import SupervisorOwner

NO_GPU_BANNER = "No GPU found — showing a simulated 8x MI300X node (--demo)"


def _new_supervisor(
    spec: NodeSpec,
    topology: Topology,
    gate: LaunchGate,
    *,
    backend: TelemetryBackend | None = None,
    readonly: bool,
    lenient: bool = False,
) -> Supervisor:
    """The supervisor over the profile file (or the demo's) and the state dir the spec names, judged by ``gate``.

    The vendor (which visibility variable a launch sets) is the GPUs', else the backend's; ``lenient`` keeps a bad
    profile file from stopping status/stop/restart of a running worker.
    """
    # The supervisor (tomlkit, its HTTP probe, the process scans) loads when one is opened: every command and the
    # attached viewer import this module, and the viewer never supervises (~2.5 MiB RSS).
    from amdtop.supervisor.core import Supervisor

    if topology.gpus:
        vendor = topology.gpus[0].vendor
    else:
        vendor = "NVIDIA" if backend is not None and backend.name == "nvml" else "AMD"
    return Supervisor(
        spec.config,
        spec.state_dir,
        gate=gate,
        topology=topology,
        vendor=vendor,
        demo=spec.demo,
        sim=backend if isinstance(backend, SimBackend) else None,
        readonly=readonly,
        lenient=lenient,
    )


@dataclass(frozen=True)
class NodeParts:
    """Parts a test, a benchmark or a replayed capture brings in place of the ones the spec would open (a seeded
    simulator, a recorded NVML capture, a stand-in for the supervisor's owner). The node is still put together here,
    the one way: the dashboard and a browser tab hold the same service whichever parts it was opened with."""

    backend: TelemetryBackend | None = None
    """Polled instead of the spec's backend (the node's notes stay empty: no "no GPU found" fallback)."""
    workers: WorkerSource | None = None
    """Stands where the supervisor's owner stands (its controls are the stand-in's); no profile file is read."""
    demo_load: DemoLoad | None = None
    proc_root: Path = Path("/proc")
    """Where processes are read (a stand-in procfs stands for a stand-in node: no sysfs of the host is audited)."""
    discover: bool | None = None
    """Look for vLLM servers on the host (``None``: unless the node is simulated)."""
    monitor: LogMonitor | None = None
    kernel: KernelFaultMonitor | None = None
    host_procs: ProcessHost | None = None


@dataclass
class Node:
    """What :func:`open_node` opened: the private part of the :class:`~amdtop.runtime.service.LocalService` that
    :func:`amdtop.runtime.open` returns; :meth:`close` releases it all (workers keep running, but the demo's)."""

    spec: NodeSpec
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
    autostart: DemoAutostart | None = None
    """The demo workers' autostart once :meth:`start_demo` ran."""

    def start_demo(self, on_failure: FailureSink | None = None) -> DemoAutostart | None:
        """Launch the stopped demo workers in the background (the simulated node, writable, with profiles): the one
        place it happens, for the dashboard and the serve; :meth:`close` stops what it launched."""
        writable = not self.spec.readonly
        if not (self.demo and writable and isinstance(self.backend, SimBackend) and self.control is not None):
            return None
        if self.autostart is None:
            self.autostart = DemoAutostart(self.control, on_failure).start()
        return self.autostart

    def stop_demo(self) -> None:
        """Stop the demo workers the autostart launched (idempotent; from any thread)."""
        autostart, self.autostart = self.autostart, None
        if autostart is not None:
            autostart.stop()

    def close(self) -> None:
        """Stop the tick loop and the demo's workers, close the monitors, the supervisor's HTTP client and the
        backend."""
        self.runtime.stop()
        self.stop_demo()
        self.pipeline.close()
        if self.control is not None:
            self.control.close()
        elif self.supervisor is not None:
            self.supervisor.close()
        self.backend.close()

    @property
    def state_dir(self) -> Path:
        return self.spec.state_dir


def _backend(spec: NodeSpec, ui: bool, supervise: bool) -> tuple[TelemetryBackend, bool, list[str]]:
    try:
        return spec.open_backend(), spec.demo, []
    except NoGpuFound:
        # GPUs on the PCI bus that no backend shows failed to come up: say so (GpusFailedInit), never the demo
        raise_if_on_bus(spec.sysfs_root, spec.kernel_log)
        if supervise and spec.backend == "auto":
            # A host without GPUs can still run CPU workers (gpus = []): validated against its NUMA nodes alone.
            sys.stderr.write("amdtop: no GPU found; supervising CPU-only workers (profiles must use gpus = [])\n")
            from amdtop.telemetry.none_backend import NoneBackend

            return NoneBackend(spec.backend_options()), False, []
        if not ui:
            raise
        return SimBackend(seed=spec.seed, partition=spec.demo_partition), True, [NO_GPU_BANNER]


def _supervisor(
    spec: NodeSpec, backend: TelemetryBackend, gate: LaunchGate, demo: bool, ui: bool, notes: list[str]
) -> Supervisor | None:
    if not (demo or spec.config.exists()):
        return None
    # In the dashboard the demo profiles stand for the simulated node, also when it came from no GPU found.
    if ui and demo and not spec.demo:
        spec = dataclasses.replace(spec, demo=True)
    sup: Supervisor | None = None
    try:
        # Lenient: a broken profile file never hides or strands running workers (listed from their launch records,
        # read, stoppable); launch and retune refuse with the file's error, shown here once.
        sup = _new_supervisor(
            spec, backend.topology(), gate, backend=backend, readonly=spec.readonly if ui else True, lenient=True
        )
        problem: Exception | None = sup.config_error
    except Exception as exc:  # a broken profile must not keep the GPUs from being shown
        problem = exc
    if problem is not None:
        if ui:
            notes.append(f"supervisor: {problem}")
        else:
            sys.stderr.write(f"amdtop: warning: profile file: {problem} (running workers are still shown)\n")
    if sup is None:
        return None
    if demo and ui:
        from amdtop.supervisor.demo import demo_pinning_note

        note = demo_pinning_note([sup.profile(n) for n in sup.names()], sup.topology, os.environ)
        if note:
            notes.append(note)
    return sup


def open_node(
    spec: NodeSpec,
    *,
    ui: bool = False,
    follow_logs: bool = True,
    window_s: float = TP_WINDOW_S,
    kernel: bool = True,
    interval: float | None = None,
    parts: NodeParts | None = None,
    supervise: bool = False,
) -> Node:
    """Open the node ``spec`` names and its pipeline; the tick loop is not started (call ``runtime.start()``), nor
    the demo's autostart (:meth:`Node.start_demo`).

    ``ui``: the dashboard's or the serve's node (simulated when no GPU is found; the supervisor writable unless
    ``readonly``, gated on the newest frame, and its failure a banner note); else a headless command's (a read-only
    supervisor, its failure a stderr warning). ``supervise``: a command that controls the workers with no serve
    running (``amdtop workers``): its supervisor writable unless ``readonly``, built whatever the profile file holds
    (its error kept for the command to report), and a host without GPUs supervising CPU-only workers.
    ``parts``: stand-ins for what the spec would open (:class:`NodeParts`).
    """
    parts = parts or NodeParts()
    if parts.backend is not None:
        backend, demo, notes = parts.backend, spec.demo, list[str]()
    else:
        backend, demo, notes = _backend(spec, ui, supervise)
    # The gate is the supervisor's from its construction; it ticks this node's loop, made below, when a launch asks.
    loop: list[NodeRuntime] = []
    gate = frame_gate(lambda: loop[0], backend.topology(), spec)
    try:
        if parts.workers is not None:
            sup = None
        elif supervise:
            # The command's own supervisor, writable unless --readonly, lenient: a bad profile file leaves status,
            # stop and restart of a running worker working (launch and retune refuse with its error).
            sup = _new_supervisor(spec, backend.topology(), gate, backend=backend, readonly=spec.readonly, lenient=True)
        else:
            sup = _supervisor(spec, backend, gate, demo, ui, notes)
        from amdtop.supervisor.owner import SupervisorOwner  # lazy: see _new_supervisor

        # A stand-in answers what the owner answers (the service's controls call it by the same names).
        control = SupervisorOwner(sup) if sup is not None else cast("SupervisorOwner | None", parts.workers)
        demo_load = sup.demo_load() if sup is not None else parts.demo_load
        if parts.kernel is not None:
            faults: KernelFaultMonitor | None = parts.kernel
        else:
            faults = kernel_monitor(spec.kernel_log, spec.sysfs_root, backend, headless=not ui) if kernel else None
        pipeline = NodePipeline(
            backend,
            control,
            proc_root=parts.proc_root,
            # The simulated node has no real processes: discovering host vLLM servers would mix real and fake workers.
            discover=backend.name != "sim" if parts.discover is None else parts.discover,
            monitor=parts.monitor,
            follow_logs=follow_logs,
            state_dir=spec.state_dir,
            demo_load=demo_load,
            window_s=window_s,
            kernel=faults,
            host_procs=parts.host_procs,
            auditor=Auditor(sys_root=spec.sysfs_root, proc_root=parts.proc_root, profiles=profile_lookup(control)),
            processes_every_s=PROCESSES_EVERY_S,
        )
    except BaseException:
        backend.close()
        raise
    runtime = NodeRuntime(pipeline, float(spec.interval if interval is None else interval))
    loop.append(runtime)
    return Node(spec, backend, pipeline, runtime, sup, control, demo, notes)


def cpu_only_topology(spec: NodeSpec) -> Topology:
    """The topology of a host without GPUs (CPU workers, ``gpus = []``): its NUMA nodes alone."""
    from amdtop.telemetry.numa import read_numa_nodes

    return Topology((), (), read_numa_nodes(Path(spec.sysfs_root)))
