"""The kernel-fault monitor the global options ask for (``--kernel-log``), shared by the headless commands and the TUI."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from amdtop.kernel.monitor import KernelFaultMonitor
from amdtop.telemetry.base import TelemetryBackend


def _warn(note: str) -> None:
    sys.stderr.write(f"amdtop: warning: {note}\n")
    sys.stderr.flush()


def kernel_monitor(
    args: argparse.Namespace, backend: TelemetryBackend, *, headless: bool = True
) -> KernelFaultMonitor | None:
    """A monitor of ``--kernel-log`` (a file, read from its start), else of this host's kernel log.

    The simulated node's GPUs are not this host's: its kernel log is read only when a file is named (to replay one).
    ``headless`` commands say on stderr, once, that no kernel log can be read; the TUI says it in its status line.
    """
    path = getattr(args, "kernel_log", None)
    if path is None and backend.name == "sim":
        return None
    root = Path(getattr(args, "sysfs_root", None) or "/sys")
    return KernelFaultMonitor(
        None if path is None else Path(path), sysfs_root=root, on_note=_warn if headless else None
    )
