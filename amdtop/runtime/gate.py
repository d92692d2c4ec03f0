"""The launch gate of an opened node: every supervisor is built with one (a required constructor argument of
:class:`~amdtop.supervisor.core.Supervisor`), so a launch is judged the same whoever asks for it."""

from __future__ import annotations

from collections.abc import Callable

from amdtop.audit.gate import LaunchGate
from amdtop.model import NodeSnapshot, Topology
from amdtop.runtime.loop import NodeRuntime
from amdtop.runtime.spec import NodeSpec


def frame_gate(runtime: Callable[[], NodeRuntime], topology: Topology, spec: NodeSpec) -> LaunchGate:
    """The gate of a polling node: it judges a frame ticked for it (the runtime owns the backend and ticks never
    overlap, so the gate polls through it, not beside it). Not the newest frame: a worker stopped a moment ago still
    holds its VRAM there, and its restart was refused for memory no live process holds.

    ``runtime`` gives the node's tick loop: the gate is built before the supervisor, which the loop's pipeline reads,
    and it is asked for the loop only when a launch runs (after :func:`~amdtop.runtime.node.open_node` returned)."""

    def sample() -> NodeSnapshot | None:
        loop = runtime()
        loop.pipeline.request_processes()  # the process lists of now, not of the last reading (up to 3 s old)
        return loop.tick().snapshot

    return LaunchGate(topology, sample, sys_root=spec.sysfs_root)
