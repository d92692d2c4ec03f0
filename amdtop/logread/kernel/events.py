"""What one kernel-log fault is: its cause, who is to suspect, and what the lines said about device and process."""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import Enum


class FaultCause(str, Enum):
    """``cause`` of a ``gpu_fault`` flag."""

    PAGE_FAULT = "page_fault"
    """The GPU touched an address the process has not mapped (amdgpu VM fault, ROCr memory access fault, Xid 31)."""
    UNCORRECTABLE = "uncorrectable"
    """An uncorrectable RAS/ECC error (amdgpu RAS, Xid 48/63/64/94/95)."""
    POISON = "poison"
    """Poisoned data created or consumed (amdgpu RAS poison mode)."""
    RESET = "reset"
    """The driver reset the GPU (amdgpu ``GPU reset begin``, NVIDIA recovery action)."""
    HANG = "hang"
    """A ring/job timed out or the runtime saw a GPU hang (amdgpu ring timeout, ROCr ``GPU Hang``, Xid 8/109/119)."""
    FALLEN_OFF_BUS = "fallen_off_bus"
    """The GPU stopped answering on PCIe (Xid 79, ``fallen off the bus``)."""
    RESET_FAILED = "reset_failed"
    """The driver's reset of the GPU failed (amdgpu ``GPU reset(N) failed``, ``ASIC reset failed with error, -N``,
    ``GPU mode1 reset failed``): the GPU is lost until the node is rebooted or power-cycled."""
    NVLINK = "nvlink"
    """An NVLink error (Xid 74, 144-150)."""
    APP_EXCEPTION = "app_exception"
    """The GPU raised an exception in the application's work (Xid 13/43, ROCr ``HW Exception`` other than a hang)."""
    DRIVER = "driver"
    """A driver or firmware error (Xid 62, GSP errors...)."""
    CLEANUP = "cleanup"
    """Channels torn down after an earlier error or a killed process (Xid 45): a consequence, rarely a cause."""


class Suspect(str, Enum):
    """Who a fault of that kind usually points at."""

    APPLICATION = "application"
    HARDWARE = "hardware"
    DRIVER = "driver"


SUSPECT: dict[FaultCause, Suspect] = {
    FaultCause.PAGE_FAULT: Suspect.APPLICATION,
    FaultCause.APP_EXCEPTION: Suspect.APPLICATION,
    FaultCause.CLEANUP: Suspect.APPLICATION,
    FaultCause.UNCORRECTABLE: Suspect.HARDWARE,
    FaultCause.POISON: Suspect.HARDWARE,
    FaultCause.FALLEN_OFF_BUS: Suspect.HARDWARE,
    FaultCause.RESET_FAILED: Suspect.HARDWARE,
    FaultCause.NVLINK: Suspect.HARDWARE,
    FaultCause.RESET: Suspect.DRIVER,
    FaultCause.HANG: Suspect.DRIVER,
    FaultCause.DRIVER: Suspect.DRIVER,
}

LOST_ADVICE = (
    "the GPU is lost: its work is gone and it takes no new work; drain it, then reboot the node (power-cycle it if "
    "the GPU does not come back) and check its RAS/ECC counts before reuse"
)
"""What to do about a GPU the driver could not bring back (a failed reset, a GPU fallen off the bus)."""

LOST = frozenset({FaultCause.RESET_FAILED, FaultCause.FALLEN_OFF_BUS})
"""Causes after which the GPU is gone (``gpu_lost``), not merely faulted."""

ADVICE: dict[Suspect, str] = {
    Suspect.APPLICATION: "usually the application's bug (a bad pointer, a freed buffer), not the GPU's",
    Suspect.HARDWARE: "a hardware error: check the GPU's ECC/RAS counts, drain and test it",
    Suspect.DRIVER: "a driver/firmware recovery: the GPU's work was lost; check what ran on it",
}


@dataclass(frozen=True, slots=True)
class KernelEvent:
    """One fault as the log told it (a page fault's five lines are one event)."""

    cause: FaultCause
    """What happened."""
    line: str
    """The line that named the fault (header line; the log's own prefix kept)."""
    bdf: str | None = None
    """PCI address ``dddd:bb:dd.f`` of the device, lowercase, where the line names one."""
    kfd_node: int | None = None
    """KFD topology node (ROCr's ``GPU node-N``) where the line names one."""
    pasid: int | None = None
    """Process address space id of the faulting context (amdgpu VM faults)."""
    pid: int | None = None
    """Process id the kernel printed (``None`` where it printed 0 or ``<unknown>``)."""
    process: str | None = None
    """Process name the kernel printed."""
    thread: str | None = None
    """Thread name."""
    address: str | None = None
    """Faulting address (``0x...``) of a page fault."""
    detail: str | None = None
    """Short extra facts: the hub and client of a VM fault, the ring of a timeout, the Xid text, the RAS block."""
    xid: int | None = None
    """NVIDIA Xid code."""
    number: int = 0
    """Line number in the stream the parser read (1-based)."""

    def with_(self, **changes: object) -> KernelEvent:
        """A copy with ``changes`` (continuation lines fill fields in)."""
        return replace(self, **changes)  # type: ignore[arg-type]

    @property
    def suspect(self) -> Suspect:
        """Who to suspect first."""
        return SUSPECT[self.cause]
