"""The kernel-fault monitor a :class:`~amdtop.runtime.spec.NodeSpec` asks for (``--kernel-log``), shared by the
headless commands, the serve and the dashboard."""

from __future__ import annotations

import sys
from pathlib import Path

from amdtop.logread.kernel.monitor import KernelFaultMonitor
from amdtop.telemetry.base import TelemetryBackend


def _warn(note: str) -> None:
    sys.stderr.write(f"amdtop: warning: {note}\n")
    sys.stderr.flush()


def kernel_monitor(
    path: Path | None, sysfs_root: Path, backend: TelemetryBackend, *, headless: bool = True
) -> KernelFaultMonitor | None:
    """A monitor of ``path`` (a file, read from its start), else of this host's kernel log.

    The simulated node's GPUs are not this host's: its kernel log is read only when a file is named (to replay one).
    ``headless`` commands say on stderr, once, that no kernel log can be read; the TUI says it in its status line.
    """
    if path is None and backend.name == "sim":
        return None
    return KernelFaultMonitor(path, sysfs_root=sysfs_root, on_note=_warn if headless else None)
