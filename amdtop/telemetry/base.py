"""The interface every telemetry backend implements."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
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


class ProcessCadence:
    """When a backend reads its per-process lists: at most every ``every`` seconds (monotonic), at once after
    :meth:`request` (a worker was launched or stopped; safe from any thread), and at every poll where ``every`` is 0.
    Between readings a backend repeats its last lists, and its snapshot says when they were read (:attr:`read_at`)."""

    __slots__ = ("_due", "_every", "_read_mono", "_wall", "read_at")

    def __init__(self, every: float, wall: Callable[[], float] = time.time) -> None:
        self._every = every
        self._wall = wall
        self._due = threading.Event()
        self._read_mono: float | None = None
        self.read_at: float | None = None
        """Wall time of the last reading, only where the cadence is slower than the poll (a list read at every poll
        needs no time of its own on screen)."""

    def due(self) -> bool:
        """Whether this poll reads the lists (and, when it does, that it did so now)."""
        now, every = time.monotonic(), self._every
        if not (self._due.is_set() or self._read_mono is None or every <= 0 or now - self._read_mono >= every):
            return False
        self._due.clear()
        self._read_mono = now
        self.read_at = self._wall() if every > 0 else None
        return True

    def request(self) -> None:
        self._due.set()


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
