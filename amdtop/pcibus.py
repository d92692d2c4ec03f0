"""The PCI bus as ground truth for which GPUs should be here: accelerators (AMD ``0x1002`` or NVIDIA ``0x10de``, class
``0x12xxxx`` processing accelerator or ``0x03xxxx`` display) read from ``/sys/bus/pci/devices/*/{vendor,class,
driver}``. One with no driver bound, or that the backend does not show, failed to come up: a node after a warm reboot
that hung its MI300Xs has eight of them on the bus and none in the driver, and must never be shown as the demo.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from amdtop.errors import AmdtopError
from amdtop.logread.incidents.model import MAX_EVIDENCE, Incident

VENDORS = {0x1002: "AMD", 0x10DE: "NVIDIA"}
ACCELERATOR_CLASSES = (0x12, 0x03)
"""PCI base classes of a GPU: processing accelerator (MI300X, H100 SXM) and display controller (PCIe cards)."""
_POWER_CYCLE = ("early_init of IP block <psp>", "PSP", "psp", "Fatal error during GPU init")


@dataclass(frozen=True, slots=True)
class PciAccelerator:
    """One accelerator function on the PCI bus."""

    bdf: str
    """PCI address ``dddd:bb:dd.f``, lowercase."""
    vendor: str
    """``AMD`` or ``NVIDIA``."""
    device_id: str | None
    """``0x74a1`` (MI300X)..., as the ``device`` file holds it."""
    pci_class: int
    """The 24-bit class code."""
    driver: str | None
    """The bound driver's name (``amdgpu``, ``nvidia``); ``None`` when none is bound."""


class GpusFailedInit(AmdtopError):
    """Accelerators are on the PCI bus but no backend shows one: the node's GPUs failed to come up."""

    def __init__(self, incident: Incident, missing: Sequence[MissingGpu] = ()) -> None:
        super().__init__(f"{incident.summary}; {incident.fix}")
        self.incident = incident
        self.missing = tuple(missing)
        """One entry per accelerator that did not come up (:func:`missing_gpus`)."""


@dataclass(frozen=True, slots=True)
class MissingGpu:
    """One accelerator on the bus that no backend shows (``missing_gpus[]`` of cli-contract.md)."""

    bdf: str
    vendor: str
    device_id: str | None
    driver: str | None
    reason: str
    kernel: tuple[str, ...] = ()
    """The kernel's own lines that name it (its failed init)."""

    def json(self) -> dict[str, Any]:
        """The contract's keys (``bdf``, ``vendor``, ``reason``, ``kernel``) and more."""
        return {
            "bdf": self.bdf,
            "vendor": self.vendor,
            "device_id": self.device_id,
            "driver": self.driver,
            "reason": self.reason,
            "kernel": list(self.kernel),
        }


def missing_gpus(missing: Sequence[PciAccelerator], kernel: Mapping[str, Sequence[str]]) -> tuple[MissingGpu, ...]:
    """Each accelerator that is on the bus and not shown, with why and the kernel's lines that name it."""
    return tuple(
        MissingGpu(
            a.bdf,
            a.vendor,
            a.device_id,
            a.driver,
            "on the PCI bus with no driver bound (its driver init failed or no driver is loaded)"
            if a.driver is None
            else f"bound to {a.driver} but not shown by the backend",
            tuple(dict.fromkeys(kernel.get(a.bdf, ())))[:MAX_EVIDENCE],
        )
        for a in missing
    )


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None


def scan(sysfs_root: Path = Path("/sys")) -> tuple[PciAccelerator, ...]:
    """Every AMD/NVIDIA accelerator function on the bus under ``sysfs_root``, in address order (empty when the bus
    cannot be read)."""
    base = sysfs_root / "bus" / "pci" / "devices"
    try:
        names = sorted(os.listdir(base))
    except OSError:
        return ()
    out = []
    for name in names:
        dev = base / name
        vendor_text, class_text = _read(dev / "vendor"), _read(dev / "class")
        try:
            vendor = int(vendor_text or "", 16)
            pci_class = int(class_text or "", 16)
        except ValueError:
            continue
        if vendor not in VENDORS or pci_class >> 16 not in ACCELERATOR_CLASSES:
            continue
        try:
            driver: str | None = os.path.basename(os.readlink(dev / "driver"))
        except OSError:
            driver = None
        out.append(PciAccelerator(name.lower(), VENDORS[vendor], _read(dev / "device"), pci_class, driver))
    return tuple(out)


def failed(accelerators: Sequence[PciAccelerator], shown: Sequence[str] | None) -> tuple[PciAccelerator, ...]:
    """Accelerators with no driver bound, or (``shown``: the backend's PCI addresses) bound but not shown."""
    seen = None if shown is None else {b.lower() for b in shown}
    return tuple(
        a
        for a in accelerators
        if a.driver is None or (seen is not None and a.vendor in _vendors_of(accelerators, seen) and a.bdf not in seen)
    )


def _vendors_of(accelerators: Sequence[PciAccelerator], seen: set[str]) -> set[str]:
    """Vendors the backend shows GPUs of: an NVIDIA backend does not answer for an AMD card beside it."""
    return {a.vendor for a in accelerators if a.bdf in seen}


def verdict(missing: Sequence[PciAccelerator], kernel: Mapping[str, Sequence[str]]) -> Incident | None:
    """One ``gpu_init_failed`` incident over the accelerators that did not come up, with the kernel's own lines about
    them (``kernel``: PCI address -> lines; ``""``: lines that named no device)."""
    if not missing:
        return None
    by: dict[str, list[PciAccelerator]] = {}
    for a in missing:
        by.setdefault(a.vendor, []).append(a)
    lines: list[str] = []
    for a in missing:
        lines += kernel.get(a.bdf, ())
    lines += kernel.get("", ())
    lines.sort(key=_stamp)  # in the order the kernel said them
    unbound = [a for a in missing if a.driver is None]
    heads = []
    for vendor, accs in by.items():
        n = len(accs)
        shown = f"{'is' if n == 1 else 'are'} not shown by the backend"
        what = "failed driver init" if all(a.driver is None for a in accs) else shown
        heads.append(f"{n} {vendor} GPU{'s' if n != 1 else ''} on the PCI bus {what}")
    quoted = "; ".join(dict.fromkeys(_short(ln) for ln in lines))
    summary = ", ".join(heads) + (
        f" (kernel: {quoted[:240]})" if quoted else " (the kernel log says nothing about them)"
    )
    if any(mark in ln for ln in lines for mark in _POWER_CYCLE):
        cause = "the GPUs' firmware (PSP) did not come back from the last reset: their init failed in the driver"
        fix = (
            "a full power cycle of the node (power off, wait, power on), not a warm reboot: a warm reboot after a "
            "hang leaves the GPUs in the state that fails init"
        )
    elif unbound and not lines:
        cause = "no driver is bound to them (the driver is not loaded, or it refused them without saying why)"
        fix = "load the driver (modprobe amdgpu / nvidia) and read dmesg for why it did not bind"
    else:
        cause = "the driver did not bring them up"
        fix = "read the kernel's lines about them (dmesg) and power-cycle the node if init keeps failing"
    return Incident(
        kind="gpu_init_failed",
        summary=summary,
        cause=cause,
        fix=fix,
        evidence=tuple(dict.fromkeys(lines))[:MAX_EVIDENCE],
        detail=(
            ("bdfs", tuple(a.bdf for a in missing)),
            ("vendors", tuple(by)),
            ("unbound", tuple(a.bdf for a in unbound)),
            ("device_ids", tuple(sorted({a.device_id or "?" for a in missing}))),
        ),
    )


def _stamp(line: str) -> float:
    """A dmesg line's seconds since boot (``inf`` without one: after the stamped lines, in their order)."""
    if line.startswith("["):
        try:
            return float(line[1 : line.find("]")])
        except ValueError:
            pass
    return float("inf")


def _short(line: str) -> str:
    """A kernel line without its stamp, device prefix and log tag (``early_init of IP block <psp> failed -22``)."""
    text = line
    if text.startswith("["):
        text = text[text.find("]") + 1 :].strip()
    for cut in ("*ERROR* ", "amdgpu: ", "]] "):
        i = text.rfind(cut)
        if i >= 0:
            text = text[i + len(cut) :]
    return text.strip()
