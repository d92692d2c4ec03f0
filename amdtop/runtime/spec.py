"""What node to open: the typed form of the global options, made by the CLI (``amdtop.cli.common.node_spec``).

The runtime opens the node from a :class:`NodeSpec` alone, never from argparse: the dashboard, ``amdtop serve`` and
every headless command describe the same node the same way, and nothing under :mod:`amdtop.runtime` knows the CLI.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

from amdtop.errors import InputError
from amdtop.telemetry import open_backend
from amdtop.telemetry.base import BackendOptions, TelemetryBackend
from amdtop.thresholds import PROCESSES_EVERY_S


@dataclass(frozen=True)
class NodeSpec:
    """The node, its profiles and its state dir, as the global options name them."""

    config: Path
    """The worker profiles (TOML)."""
    state_dir: Path
    """Worker state, logs and the serve's socket."""
    backend: str = "auto"
    sysfs_root: Path = Path("/sys")
    demo: bool = False
    """The simulated node with its demo workers (``--demo``)."""
    interval: float = 1.0
    readonly: bool = False
    seed: int = 0
    demo_partition: str | None = None
    kernel_log: Path | None = None
    """Kernel messages to read for GPU faults (``None``: this host's, except for the simulated node)."""

    def backend_options(self) -> BackendOptions:
        """The backend's options (InputError naming the flag when the sysfs tree or the partition is wrong)."""
        root = self.sysfs_root
        if self.backend in ("sysfs", "auto") and root != Path("/sys"):
            if not root.exists():
                raise InputError(f"--sysfs-root: {root} does not exist; point it at a sysfs tree (default /sys)")
            if not root.is_dir():
                raise InputError(f"--sysfs-root: {root} is not a directory; point it at a sysfs tree (default /sys)")
            if not os.access(root, os.R_OK | os.X_OK):
                raise InputError(f"--sysfs-root: {root} is not readable; fix its permissions or pick another tree")
        if self.demo_partition is not None and not (self.demo or self.backend == "sim"):
            raise InputError("--demo-partition: only the simulated node has a settable partition mode; add --demo")
        return BackendOptions(
            sysfs_root=root, seed=self.seed, partition=self.demo_partition, processes_every_s=PROCESSES_EVERY_S
        )

    @property
    def backend_name(self) -> str:
        """The backend to open (``--demo`` means ``sim``)."""
        return "sim" if self.demo else self.backend

    def open_backend(self) -> TelemetryBackend:
        """Open the backend the spec names."""
        backend = open_backend(self.backend_name, self.backend_options())
        if self.backend_name == "auto":
            # The contract promises that auto says what it picked; stderr keeps --json stdout clean.
            sys.stderr.write(f"amdtop: backend auto picked {backend.name}\n")
        return backend
