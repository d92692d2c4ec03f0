"""Corrected PCIe errors as the kernel reports them, by the device or port that reported them.

Two emitters print them, and each line is read from its own source:

- PCIe AER (torvalds/linux drivers/pci/pcie/aer.c): ``aer_print_port_info`` prints ``"%s%s error message received
  from %s\\n"`` ("Correctable"/"Corrected"), ``aer_print_error`` ``"PCIe Bus Error: severity=%s, type=%s, (%s)\\n"``
  (``Correctable``, older ``Corrected``), and for errors that came through firmware (APEI) ``cper_print_aer`` prints
  ``"aer_status: 0x%08x, aer_mask: 0x%08x\\n"`` and ``"aer_layer=%s, aer_agent=%s\\n"``, then
  ``"aer_uncor_severity: 0x%08x\\n"`` only ``if (aer_severity != AER_CORRECTABLE)``: an ``aer_layer`` report that
  no ``aer_uncor_severity`` line follows is a correctable one.
- APEI GHES (drivers/acpi/apei/ghes.c ``__ghes_print_estatus``: ``"%s{%u}" HW_ERR "Hardware error from APEI Generic
  Hardware Error Source: %d\\n"``; drivers/firmware/efi/cper.c ``cper_estatus_print``: ``"event severity: %s\\n"``,
  ``cper_estatus_print_section``: ``"Error %d, type: %s\\n"``, ``"section_type: %s\\n"`` ("PCIe error"), and
  ``cper_print_pcie``: ``"port_type: %d, %s\\n"``, ``"device_id: %04x:%02x:%02x.%x\\n"``). A PCIe section whose
  severity is ``corrected`` names its device on its ``device_id`` line.

Only corrected reports are kept here: an uncorrected (fatal) AER is the fatal-PCIe verdict's, never this one's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from amdtop.logread.incidents.model import MAX_EVIDENCE, Incident

_BDF = r"[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]"
_AER_RECEIVED = re.compile(
    rf"AER: (?:Corrected|Correctable) error(?: message)? received(?: from|:)? (?:id=)?(?P<src>{_BDF})"
)
# to 4.x aer_print_error printed the requester as "id=%04x(%s)" ("id=00e5(Receiver ID)"): the device is the line's own
_AER_SEVERITY = re.compile(
    rf"(?P<dev>{_BDF}): PCIe Bus Error: severity=(?:Corrected|Correctable), type=(?P<layer>[^,]+), "
    r"(?:id=[0-9a-fA-F]{4})?\((?P<agent>[^)]+)\)"
)
_AER_LAYER = re.compile(rf"(?P<dev>{_BDF}): (?:AER: )?aer_layer=(?P<layer>[^,]+), aer_agent=(?P<agent>.+?)\s*$")
_AER_UNCOR = re.compile(rf"(?P<dev>{_BDF}): (?:AER: )?aer_uncor_severity: ")
_GHES = re.compile(r"\{(?P<rec>\d+)\}\[Hardware Error\]:\s*(?P<msg>.*?)\s*$")
_GHES_SEV = re.compile(r"^(?:event severity|Error \d+, type): (?P<sev>\w+)")
_GHES_DEV = re.compile(rf"^device_id: (?P<dev>{_BDF})$")
_GHES_PORT = re.compile(r"^port_type: \d+, (?P<port>.+)$")

MAX_DEVICES = 64
MAX_LINES = 6


@dataclass(slots=True)
class _Device:
    lines: list[str] = field(default_factory=list)
    count: int = 0
    via: dict[str, None] = field(default_factory=dict)
    """How it was reported (``AER: Data Link Layer, Receiver ID``, ``APEI GHES: root port``), in order."""

    def add(self, line: str, via: str | None, n: int = 1) -> None:
        self.count += n
        if via:
            self.via.setdefault(via, None)
        if len(self.lines) < MAX_LINES and line not in self.lines:
            self.lines.append(line)


@dataclass(slots=True)
class CorrectedPcie:
    """Feed it the kernel's AER and GHES lines in order; :meth:`incident` tells the corrected errors seen."""

    devices: dict[str, _Device] = field(default_factory=dict)
    _pending: tuple[str, str, str] | None = None
    """An ``aer_layer`` report (device, how, line) whose severity the next lines decide."""
    _ghes_sev: dict[str, str] = field(default_factory=dict)
    """GHES record -> severity of its current section."""
    _ghes_pcie: dict[str, tuple[list[str], str | None]] = field(default_factory=dict)
    """GHES record -> (its lines so far, port type) while its current section is a corrected PCIe error."""

    def wants(self, line: str) -> bool:
        """Whether ``line`` is one of the emitters' lines (cheap substring tests)."""
        return "[Hardware Error]" in line or "AER" in line or "aer_" in line or "PCIe Bus Error" in line

    def feed(self, line: str) -> None:
        if self._pending is not None and "aer_uncor_severity" not in line:
            self._settle()
        if "[Hardware Error]" in line:
            self._ghes(line)
            return
        if (m := _AER_UNCOR.search(line)) is not None:
            self._pending = None  # cper_print_aer printed it: the report above was not correctable
            return
        if (m := _AER_LAYER.search(line)) is not None:
            self._pending = (m.group("dev").lower(), f"AER: {m.group('layer')}, {m.group('agent')}", line.strip())
            return
        if (m := _AER_SEVERITY.search(line)) is not None:
            self._add(m.group("dev"), line, f"AER: {m.group('layer').strip()}, {m.group('agent')}")
            return
        if (m := _AER_RECEIVED.search(line)) is not None:
            # the port's "received from" line announces the report the source's own lines then give: not a second one
            self._add(m.group("src"), line, None, 0)

    def _settle(self) -> None:
        assert self._pending is not None
        dev, via, line = self._pending
        self._pending = None
        self._add(dev, line, via)

    def _add(self, dev: str, line: str, via: str | None, n: int = 1) -> None:
        dev = dev.lower()
        if dev not in self.devices and len(self.devices) >= MAX_DEVICES:
            return
        self.devices.setdefault(dev, _Device()).add(line.strip(), via, n)

    def _ghes(self, line: str) -> None:
        m = _GHES.search(line)
        if m is None:
            return
        rec, msg = m.group("rec"), m.group("msg")
        if len(self._ghes_sev) >= MAX_DEVICES and rec not in self._ghes_sev:
            self._ghes_sev.clear()
            self._ghes_pcie.clear()
        s = _GHES_SEV.match(msg)
        if s:
            self._ghes_sev[rec] = s.group("sev").lower()
            self._ghes_pcie.pop(rec, None)  # a new section (or record) begins
            return
        if msg.startswith("section_type:"):
            if msg == "section_type: PCIe error" and self._ghes_sev.get(rec) == "corrected":
                self._ghes_pcie[rec] = ([line.strip()], None)
            return
        held = self._ghes_pcie.get(rec)
        if held is None:
            return
        lines, port = held
        p = _GHES_PORT.match(msg)
        if p:
            self._ghes_pcie[rec] = ([*lines, line.strip()], p.group("port"))
            return
        d = _GHES_DEV.match(msg)
        if d:
            via = "APEI GHES" + (f": {port}" if port else "")
            for ln in lines:
                self._add(d.group("dev"), ln, via, 0)  # one report over several lines
            self._add(d.group("dev"), line, via)
            self._ghes_pcie.pop(rec, None)

    def incident(self) -> Incident | None:
        """One verdict over every device that reported a corrected PCIe error (``None`` where none did). A pending
        ``aer_layer`` report that no ``aer_uncor_severity`` line has followed yet is counted as correctable, without
        settling it (the next line may still say otherwise)."""
        devices = dict(self.devices)
        if self._pending is not None:
            dev, via, line = self._pending
            held = devices.get(dev)
            d = _Device(list(held.lines), held.count, dict(held.via)) if held else _Device()
            d.add(line, via)
            devices[dev] = d
        if not devices:
            return None
        parts = []
        for dev, d in devices.items():
            via = "; ".join(d.via) if d.via else "AER"
            parts.append(f"{dev} ({via}" + (f", {d.count} reports)" if d.count > 1 else ")"))
        n = len(devices)
        return Incident(
            kind="correctable_errors",
            summary=f"corrected PCIe errors on {n} device{'s' if n != 1 else ''}/port{'s' if n != 1 else ''}: "
            + ", ".join(parts[:6])
            + (f" (+{n - 6} more)" if n > 6 else ""),
            cause="PCIe errors that the hardware corrected (AER correctable, or APEI firmware reports of severity "
            "corrected) on these links: nothing was lost, but a steady stream points at a marginal link (signal "
            "integrity, a riser/cable/slot, link speed)",
            fix="nothing to restart; watch the counts (lspci -vv: CESta, /sys/bus/pci/devices/*/aer_dev_correctable); "
            "if they keep rising, reseat the card/riser or lower the link speed, and check the slot",
            evidence=tuple(ln for d in devices.values() for ln in d.lines)[:MAX_EVIDENCE],
            detail=(
                ("devices", tuple(devices)),
                ("reports", tuple(d.count for d in devices.values())),
                ("via", tuple("; ".join(d.via) for d in devices.values())),
            ),
        )
