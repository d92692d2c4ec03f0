"""NVIDIA Xid codes to a cause (from NVIDIA's "Xid Errors" catalog, docs.nvidia.com/deploy/xid-errors/)."""

from __future__ import annotations

from amdtop.logread.kernel.events import FaultCause
from amdtop.logread.nvidia_codes import nvidia_codes

XID_CAUSES: dict[int, tuple[FaultCause, str]] = {
    code: (FaultCause(x.cause), x.name) for code, x in nvidia_codes().xid.items()
}
"""Every Xid of NVIDIA's Xid catalog: what amdtop suspects first and its name. Read from ``[xid_catalog]`` in
``amdtop/logread/catalog/nvidia.toml`` (the data, with NVIDIA's resolution for each code)."""


CHANNEL_XIDS = frozenset(code for code, x in nvidia_codes().xid.items() if x.channel)
"""Xids reported for a channel in error, whose ``pid=``/``name=`` is the channel's owner (the process whose work
faulted): the rows marked ``channel`` in ``[xid_catalog]``. For every other Xid the driver prints the process that
happened to be calling into it when the error was logged (NVIDIA/open-gpu-kernel-modules
src/nvidia/src/kernel/gpu/rc/kernel_rc.c, krcReportXid: the channel's ``ProcessID`` when there is a channel in error,
else ``osGetCurrentProcess()``): an Xid 119 (GSP RPC timeout) logged under ``nvidia-smi`` or a monitoring agent's
thread is not that program's fault."""


def xid_cause(code: int) -> tuple[FaultCause, str]:
    """The cause and NVIDIA's name of Xid ``code`` (a code newer than the catalog is a driver error, named by number)."""
    return XID_CAUSES.get(code, (FaultCause.DRIVER, f"Xid {code}"))


def xid_fix(code: int) -> str | None:
    """NVIDIA's resolution for Xid ``code``, spelled out (``None`` for a code the catalog lacks)."""
    x = nvidia_codes().xid.get(code)
    return x.fix if x is not None else None


_CAUSED_BY = "caused by previous Xid "
_AFTER_SXID = "after NVSwitch SXid "


def xid_advice(xid: int | None, detail: str | None) -> str | None:
    """Advice that depends on the Xid itself: a chain's named cause, else NVIDIA's resolution for the code from the
    catalog (``None``: not an Xid, or a code the catalog lacks; the cause's general advice holds)."""
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
    return xid_fix(xid) if xid is not None else None
