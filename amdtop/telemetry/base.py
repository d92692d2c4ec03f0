"""The interface every telemetry backend implements."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

from amdtop.model import NodeSnapshot, Topology


@dataclass(frozen=True, slots=True)
class BackendOptions:
    """What the command line tells backends."""

    sysfs_root: Path = Path("/sys")
    """Root for the sysfs backend (``--sysfs-root``)."""
    proc_root: Path = Path("/proc")
    """Root of procfs (tests point it elsewhere)."""
    seed: int = 0
    """Seed of the simulated node."""
    scenario: str = "mi300x-8"
    """Simulated node layout (``mi300x-8``, ``pcie-4``, ``empty``)."""
    partition: str | None = None
    """Partition mode of the simulated GPUs (``--demo-partition``: ``CPX``, ``CPX/NPS4``, ``DPX/NPS1``...)."""
    processes_every_s: float = 0.0
    """Read the per-process lists (and NVML's per-process utilisation) at most this often, repeating the last list in
    between; 0 reads them at every poll (one-shot commands, tests). The live dashboard and ``serve`` pass
    :data:`amdtop.thresholds.PROCESSES_EVERY_S`."""


@runtime_checkable
class TelemetryBackend(Protocol):
    """A source of node snapshots.

    ``sample()`` does all device I/O of one poll and returns one immutable snapshot; it must never raise for a
    single GPU's failure (that GPU is reported as lost instead).
    """

    name: str

    def topology(self) -> Topology:
        """Return the static topology (read once, cached)."""
        ...

    def sample(self) -> NodeSnapshot:
        """Poll every GPU once."""
        ...

    def close(self) -> None:
        """Release library handles."""
        ...
