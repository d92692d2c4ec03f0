"""``--backend none``: no GPU telemetry, for hosts without GPUs (CPU workers, logs, kernel faults and analysis still
run). The topology holds this host's NUMA nodes and no GPU."""

from __future__ import annotations

import socket
import time

from amdtop.model import NodeSnapshot, Topology
from amdtop.telemetry.base import BackendOptions
from amdtop.telemetry.numa import read_numa_nodes


class NoneBackend:
    """A backend that polls nothing: every snapshot has no GPU."""

    name = "none"

    def __init__(self, options: BackendOptions) -> None:
        """Read the host's NUMA nodes once (under ``--sysfs-root``)."""
        self._topology = Topology((), (), read_numa_nodes(options.sysfs_root))
        self._host = socket.gethostname()

    def topology(self) -> Topology:
        """No GPU, no link; the host's NUMA nodes."""
        return self._topology

    def sample(self) -> NodeSnapshot:
        """An empty snapshot, timestamped."""
        return NodeSnapshot("none", self._host, time.time(), self._topology, ())

    def close(self) -> None:
        """Nothing to release."""


def open_backend(options: BackendOptions) -> NoneBackend:
    """The ``none`` backend (it cannot fail)."""
    return NoneBackend(options)
