"""NVIDIA Xid codes to a cause (from NVIDIA's "Xid Errors" catalog, docs.nvidia.com/deploy/xid-errors/)."""

from __future__ import annotations

from amdtop.kernel.events import FaultCause

XID_CAUSES: dict[int, tuple[FaultCause, str]] = {
    8: (FaultCause.HANG, "GPU stopped processing"),
    13: (FaultCause.APP_EXCEPTION, "graphics engine exception"),
    31: (FaultCause.PAGE_FAULT, "GPU memory page fault"),
    32: (FaultCause.APP_EXCEPTION, "invalid or corrupted push buffer stream"),
    38: (FaultCause.DRIVER, "driver firmware error"),
    43: (FaultCause.APP_EXCEPTION, "GPU stopped processing (the context was reset)"),
    45: (FaultCause.CLEANUP, "preemptive cleanup, due to a previous error or a killed process"),
    48: (FaultCause.UNCORRECTABLE, "double bit ECC error"),
    56: (FaultCause.DRIVER, "display engine error"),
    61: (FaultCause.DRIVER, "internal micro-controller breakpoint/warning"),
    62: (FaultCause.DRIVER, "internal micro-controller halt"),
    63: (FaultCause.UNCORRECTABLE, "ECC page retirement or row remapping recording event"),
    64: (FaultCause.UNCORRECTABLE, "ECC page retirement or row remapper recording failure"),
    68: (FaultCause.DRIVER, "NVDEC0 exception"),
    69: (FaultCause.APP_EXCEPTION, "graphics engine class error"),
    74: (FaultCause.NVLINK, "NVLink error"),
    79: (FaultCause.FALLEN_OFF_BUS, "GPU has fallen off the bus"),
    92: (FaultCause.UNCORRECTABLE, "high single-bit ECC error rate"),
    94: (FaultCause.UNCORRECTABLE, "contained ECC error"),
    95: (FaultCause.UNCORRECTABLE, "uncontained ECC error"),
    109: (FaultCause.HANG, "context switch timeout"),
    119: (FaultCause.HANG, "GSP RPC timeout"),
    120: (FaultCause.DRIVER, "GSP error"),
    121: (FaultCause.NVLINK, "C2C link corrected error"),
    123: (FaultCause.DRIVER, "SPI PMU RPC write failure"),
    136: (FaultCause.DRIVER, "link training failed"),
    140: (FaultCause.UNCORRECTABLE, "unrecovered ECC error"),
    143: (FaultCause.DRIVER, "GPU initialization failure"),
    144: (FaultCause.NVLINK, "NVLink SAW error"),
    145: (FaultCause.NVLINK, "NVLink RLW error"),
    146: (FaultCause.NVLINK, "NVLink TLW error"),
    147: (FaultCause.NVLINK, "NVLink TREX error"),
    148: (FaultCause.NVLINK, "NVLink NVLPW_CTRL error"),
    149: (FaultCause.NVLINK, "NVLink NETIR error"),
    150: (FaultCause.NVLINK, "NVLink MSE error"),
    154: (FaultCause.RESET, "GPU recovery action changed"),
}


CHANNEL_XIDS = frozenset({13, 31, 32, 43, 45, 68, 69, 94, 95, 109})
"""Xids reported for a channel in error, whose ``pid=``/``name=`` is the channel's owner (the process whose work
faulted). For every other Xid the driver prints the process that happened to be calling into it when the error was
logged (NVIDIA/open-gpu-kernel-modules src/nvidia/src/kernel/gpu/rc/kernel_rc.c, krcReportXid: the channel's
``ProcessID`` when there is a channel in error, else ``osGetCurrentProcess()``): an Xid 119 (GSP RPC timeout) logged
under ``nvidia-smi`` or a monitoring agent's thread is not that program's fault."""


def xid_cause(code: int) -> tuple[FaultCause, str]:
    """The cause and NVIDIA's name of Xid ``code`` (unknown codes are driver errors, named by number)."""
    return XID_CAUSES.get(code, (FaultCause.DRIVER, f"Xid {code}"))


_CAUSED_BY = "caused by previous Xid "
_AFTER_SXID = "after NVSwitch SXid "


def xid_advice(xid: int | None, detail: str | None) -> str | None:
    """Advice that depends on the Xid itself rather than its cause (``None``: the cause's general advice holds)."""
    if xid == 45 and detail and _CAUSED_BY in detail:
        prev = detail[detail.find(_CAUSED_BY) + len(_CAUSED_BY) :].split()[0].rstrip(".,")
        if prev == "45":
            # a cleanup names an earlier cleanup: still a consequence; the first cause is further back, never itself
            return "a consequence of an earlier cleanup (Xid 45): the first cause is an Xid before those; read back"
        name = xid_cause(int(prev))[1] if prev.isdigit() else "an earlier error"
        return f"a consequence: the earlier Xid {prev} ({name}) is the cause; follow its resolution"
    if xid == 45 and detail and _AFTER_SXID in detail:
        sxid = detail[detail.find(_AFTER_SXID) + len(_AFTER_SXID) :].split()[0].rstrip(".,)")
        return (
            f"a consequence: the NVSwitch error before it (SXid {sxid}) is the cause, not the application; check the "
            "fabric (nvidia-smi nvlink -s, the fabric manager's log) and reset the GPUs and switches"
        )
    if xid == 94:
        return "contained ECC error: only the application that used the memory was hit; restart the application"
    if xid == 95:
        return "uncontained ECC error: any application on the GPU may have read bad data; drain the GPU and reset it"
    return None
