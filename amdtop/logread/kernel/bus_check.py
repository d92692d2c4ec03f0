"""GPUs on the PCI bus that no backend shows: say so with the kernel's own lines, never open the demo instead."""

from __future__ import annotations

from pathlib import Path

from amdtop.logread.kernel.incidents import KernelVerdicts
from amdtop.logread.kernel.sources import SourceUnavailable, open_kernel_source
from amdtop.pcibus import GpusFailedInit, failed, missing_gpus, scan, verdict

_MAX_READS = 64
"""Reads of the kernel source at most (each bounded by the source): the ring buffer, or a saved log's head."""


def init_failure_lines(kernel_log: Path | None) -> dict[str, tuple[str, ...]]:
    """PCI address -> the kernel's lines about a failed driver init, from ``kernel_log`` or the ring buffer since
    boot (empty when no kernel log can be read)."""
    try:
        source = open_kernel_source(kernel_log)
    except SourceUnavailable:
        return {}
    verdicts = KernelVerdicts()
    try:
        for _ in range(_MAX_READS):
            lines = source.read()
            if not lines:
                break
            for line in lines:
                verdicts.feed(line)
    except OSError:
        pass
    finally:
        source.close()
    return verdicts.init_failures


def raise_if_on_bus(sysfs_root: Path, kernel_log: Path | None) -> None:
    """Raise :class:`GpusFailedInit` when accelerators sit on the PCI bus with no driver bound (no backend found a
    GPU: any accelerator on the bus failed to come up)."""
    on_bus = scan(sysfs_root)
    if not on_bus:
        return
    missing = failed(on_bus, ()) or on_bus
    kernel = init_failure_lines(kernel_log)
    incident = verdict(missing, kernel)
    if incident is not None:
        raise GpusFailedInit(incident, missing_gpus(missing, kernel))
