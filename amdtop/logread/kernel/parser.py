"""Kernel-log lines to :class:`KernelEvent` values.

The driver prints one fault over several lines (amdgpu: the VM fault header with the pasid, then the process, the
address and the status registers; a ring timeout, then the process), so the parser keeps one fault open per device and
lets the following lines of that device fill it in. The patterns search anywhere in a line, so the prefixes of dmesg
(``[  12.345]``, ``[Thu Sep 10 ...]``), journalctl (``Nov 14 10:46:51 host kernel:``), syslog and ``/dev/kmsg`` all
work, and lines from other drivers cost one regex search each.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from amdtop.logread.kernel.events import FaultCause, KernelEvent
from amdtop.logread.kernel.xid import CHANNEL_XIDS, xid_cause

_DEV = re.compile(r"\bamdgpu (?P<bdf>[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]):")
_PAGE_FAULT = re.compile(
    r"\[(?P<hub>[a-z]+\d*)\] (?:(?:no-)?retry )?(?:VMC )?page fault "
    r"\(src_id:\d+ ring:\d+ vm_?id:\d+ pas_?id:(?P<pasid>\d+)"
)
_PROCESS = re.compile(
    r"(?:Process information: process|[Ff]or process|[Ii]n process|Process) (?P<proc>.*?) pid (?P<pid>\d+) "
    r"thread (?P<thread>.*?) pid (?P<tid>\d+)"
)
_ADDRESS = re.compile(
    r"(?:in page starting at address|at page) (?P<addr>0x[0-9a-fA-F]+)(?: from (?:IH )?client (?P<client>\S+(?: \(\w+\))?))?"
)
_STATUS = re.compile(r"\b(?:GC)?VM_L2_PROTECTION_FAULT_STATUS:(?P<status>0x[0-9a-fA-F]+)")
# gmc_v7_0.c / gmc_v8_0.c (older GPUs): dev_err("GPU fault detected: %d 0x%08x for process %s pid %d thread %s pid %d\n")
_OLD_FAULT = re.compile(r"\bGPU fault detected: (?P<src>\d+) (?P<status>0x[0-9a-fA-F]+)")
_RING_TIMEOUT = re.compile(r"\bring (?P<ring>\S+) timeout, signaled seq=\d+, emitted seq=\d+")
_RESET = re.compile(r"\bGPU reset begin!")
# The reset method each device of a reset domain prints (amdgpu_device.c / soc15.c / nv.c ... dev_info "MODE1 reset",
# "GPU mode1 reset", "GPU smu mode1 reset", "GPU psp mode1 reset", "MODE2 reset", "BACO reset", "GPU pci config
# reset"): one line per GPU the reset took, where "GPU reset begin!" is printed once, by the GPU that asked.
_RESET_METHOD = re.compile(
    r"\b(?P<method>(?:GPU (?:smu |psp )?)?(?:MODE[12]|mode[12]|BACO|PCI config|pci config) reset)\s*$"
)
# A reset that did not bring the GPU back (amdgpu_device.c: "GPU reset(%d) failed", "GPU reset end with ret = %d",
# "ASIC reset failed with error, %d for drm dev, %s", "amdgpu_device_ip_resume failed (%d)."; the asic files:
# "GPU mode1 reset failed").
_RESET_FAILED = re.compile(
    r"\bGPU reset\(\d+\) failed|\bGPU reset end with ret = -\d+|\bASIC reset failed with error, -?\d+"
    r"|\b(?:GPU )?mode1 reset failed|\bamdgpu_device_ip_resume failed \(-?\d+\)"
)
# gfx_v*_0.c priv_reg_irq / priv_inst_irq / bad_op_irq: DRM_ERROR("Illegal register access in command stream"),
# ("Illegal instruction in command stream"), ("Illegal opcode in command stream"): the submitted work was invalid.
_ILLEGAL = re.compile(r"\bIllegal (?P<what>register access|instruction|opcode) in command stream")
# "no uncorrectable hardware errors detected" is the all-clear, and "correctable" alone is corrected.
_UNCORRECTABLE = re.compile(
    r"(?<!no )\b(?:(?P<count>\d+) (?:new )?uncorrectable hardware errors? detected in (?P<block>\w+) block"
    r"|uncorrectable hardware error\((?P<event>\w+)\) detected)"
)
_POISON = re.compile(r"\b[Pp]oison (?:is created|consumption|consumed|data)")
_HW_EXCEPTION = re.compile(
    r"HW Exception by GPU node-(?P<node>\d+) \(Agent handle: (?P<agent>0x[0-9a-fA-F]+)\) reason ?:\s*(?P<reason>.*?)\s*$"
)
_ACCESS_FAULT = re.compile(
    r"Memory access fault by GPU node-(?P<node>\d+) \(Agent handle: 0x[0-9a-fA-F]+\) on address "
    r"(?P<addr>0x[0-9a-fA-F]+)\.?(?:\s*Reason: (?P<reason>.*?))?\s*$"
)
# NVIDIA/open-gpu-kernel-modules src/nvidia/src/kernel/gpu/gpu.c / nv.c: "NVRM: Xid (PCI:%04x:%02x:%02x): %d, ..."
# (the address as the driver printed it). A log pasted with the address cut or elided ("(PCI:...)", "(PCI:<bdf>)",
# redacted) still says which Xid happened: the line is read and the device is stated unknown, never guessed.
_XID = re.compile(
    r"NVRM: Xid \((?:PCI:)?(?:(?P<bus>[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2})(?:\.(?P<fn>[0-7]))?|[^()]{0,40})\): "
    r"(?P<xid>\d+),\s*(?P<rest>.*?)\s*$"
)
_XID_PID = re.compile(r"pid=(?:(?P<pid>\d+)|'?<unknown>'?),\s*(?:name=(?P<name>[^,]*),\s*)?")
# NVIDIA/open-gpu-kernel-modules src/common/nvswitch/kernel/inc/common_nvswitch.h (NVSWITCH_PRINT_SXID):
# "nvidia-%s: SXid (PCI:" NVLINK_PCI_DEV_FMT "): %05d, " _fmt
_SXID = re.compile(
    r"nvidia-(?P<switch>nvswitch\d+): SXid \(PCI:(?P<bdf>[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])\): "
    r"(?P<sxid>\d+),\s*(?P<rest>.*?)\s*$"
)
# kernel_gsp.c _kgspLogRpcTimeout: NV_PRINTF "***... GSP Timeout ***", prefixed "NVRM: GPU%d " by the driver
_GSP_BANNER = re.compile(r"NVRM: GPU(?P<inst>\d+) _kgspLogRpcTimeout: \*+ GSP Timeout")
_NV_GPU = re.compile(
    r"NVRM: (?:The NVIDIA GPU|GPU at)\s+(?:PCI:)?(?P<bus>[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2})(?:\.(?P<fn>[0-7]))?"
)
_FALLEN = "fallen off the bus"

_MAX_OPEN = 64
"""Faults kept open at once (one per device): a log naming more devices than a node has finishes the oldest."""
_MAX_LINE = 4096
"""Longer lines are cut: a kernel record is at most ~1 KB, anything longer is not a driver message."""


def _bdf(bus: str, fn: str | None) -> str:
    return f"{bus.lower()}.{fn or '0'}"


def _pid(text: str | None) -> int | None:
    value = int(text) if text else 0
    return value or None  # the kernel prints pid 0 for a fault it could not tie to a process


class KernelLogParser:
    """Feed lines in order; :meth:`feed` returns the faults finished by that line, :meth:`flush` the open ones."""

    def __init__(self) -> None:
        self._open: dict[str, KernelEvent] = {}
        """Faults still taking continuation lines, by device (``""``: a ``[drm:...]`` line that named none)."""
        self._nv_bdf: str | None = None
        """The NVIDIA GPU the last ``NVRM: GPU at``/``The NVIDIA GPU`` line named (multi-line fallen-off report)."""
        self.lines = 0
        self._sxid_seen: str | None = None
        """The last NVSwitch SXid read (``"12028 on nvswitch1"``): an Xid 45 after it is that error's cleanup."""

    def feed(self, raw: str) -> list[KernelEvent]:
        """Parse one line."""
        self.lines += 1
        line = raw[:_MAX_LINE].rstrip()
        if not line:
            return []
        if "NVRM" in line:
            return self._nvidia(line)
        if "SXid (" in line:
            return self._sxid(line)
        if "GPU node-" in line:
            return self._rocr(line)
        # Substring tests (C speed, written out: a generator costs more than the tests) decide whether a line is
        # worth a regex; a busy host's kernel log is mostly other drivers' lines.
        # every amdgpu line says "amdgpu" ("amdgpu 0000:..:" or "[drm:... [amdgpu]]") or "drm" (a BSD's "drmn0:"): a
        # job log's "reset" or "timeout" is not worth the header regexes
        if not ("amdgpu" in line or "drm" in line) or not (
            "page fault" in line
            or "timeout, signaled" in line
            or "GPU fault detected" in line
            or "reset" in line
            or "in command stream" in line
            or "ip_resume failed" in line
            or "uncorrectable hardware error" in line
            or "oison" in line
        ):
            if not self._open:
                return []
            continuation = "rocess" in line or "page starting" in line or "at page" in line
            if not continuation and not ("" in self._open and "amdgpu" in line):
                return []
        dev = _DEV.search(line)
        key = dev.group("bdf").lower() if dev else ""
        done: list[KernelEvent] = []
        if key and "" in self._open:
            # A [drm:amdgpu_job_timedout] report names no device; the device's next line (its reset) does.
            done.append(self._open.pop("").with_(bdf=key))
        header = self._header(line, key or None)
        if header is not None:
            held = self._open.get(key)
            if held is not None and (merged := _merge(held, header)) is not None:
                # one fault told over several lines: a reset begun, then its method, then its failure; an illegal
                # command stream, then the ring timeout it caused
                self._open[key] = merged
                return done
            if held is not None:
                done.append(self._open.pop(key))
            elif len(self._open) >= _MAX_OPEN:
                done.append(self._open.pop(next(iter(self._open))))  # the oldest open fault is finished
            self._open[key] = header
            return done
        current = self._open.get(key)
        if current is not None:
            self._open[key] = self._continue(current, line)
        return done

    def pending(self) -> list[KernelEvent]:
        """The faults still open, left open (a report over a log still being read)."""
        return list(self._open.values())

    def flush(self) -> list[KernelEvent]:
        """The faults still open (the end of what was read so far)."""
        done = list(self._open.values())
        self._open.clear()
        return done

    # -- amdgpu ---------------------------------------------------------------------------------------------------
    def _header(self, line: str, bdf: str | None) -> KernelEvent | None:
        n = self.lines
        m = _PAGE_FAULT.search(line)
        if m:
            event = KernelEvent(
                FaultCause.PAGE_FAULT,
                line,
                bdf=bdf,
                pasid=int(m.group("pasid")) or None,
                detail=m.group("hub"),
                number=n,
            )
            return self._continue(event, line[m.end() :])
        m = _OLD_FAULT.search(line)
        if m:
            event = KernelEvent(FaultCause.PAGE_FAULT, line, bdf=bdf, detail=f"VM fault {m.group('src')}", number=n)
            return self._continue(event, line[m.end() :])
        m = _RING_TIMEOUT.search(line)
        if m:
            return KernelEvent(FaultCause.HANG, line, bdf=bdf, detail=f"ring {m.group('ring')} timeout", number=n)
        m = _RESET_FAILED.search(line)
        if m:
            return KernelEvent(FaultCause.RESET_FAILED, line, bdf=bdf, detail=m.group(0), number=n)
        if _RESET.search(line):
            return KernelEvent(FaultCause.RESET, line, bdf=bdf, detail="GPU reset", number=n)
        m = _RESET_METHOD.search(line)
        if m and "amdgpu" in line:
            return KernelEvent(FaultCause.RESET, line, bdf=bdf, detail=m.group("method"), number=n)
        m = _ILLEGAL.search(line)
        if m:
            what = f"illegal {m.group('what')} in command stream"
            return KernelEvent(FaultCause.APP_EXCEPTION, line, bdf=bdf, detail=what, number=n)
        m = _UNCORRECTABLE.search(line)
        if m:
            if m.group("block"):
                detail = f"{m.group('count')} uncorrectable errors in {m.group('block').lower()}"
            else:
                detail = m.group("event")
            return KernelEvent(FaultCause.UNCORRECTABLE, line, bdf=bdf, detail=detail, number=n)
        if _POISON.search(line):
            return KernelEvent(FaultCause.POISON, line, bdf=bdf, detail="RAS poison", number=n)
        return None

    @staticmethod
    def _continue(event: KernelEvent, line: str) -> KernelEvent:
        m = _PROCESS.search(line)
        if m and event.pid is None:
            event = event.with_(
                pid=_pid(m.group("pid")), process=m.group("proc") or None, thread=m.group("thread") or None
            )
        if event.cause is FaultCause.PAGE_FAULT:
            m = _ADDRESS.search(line)
            if m and event.address is None:
                client = m.group("client")
                detail = f"{event.detail} client {client}" if client and event.detail else event.detail
                event = event.with_(address=m.group("addr"), detail=detail)
        return event

    # -- ROCr (the HSA runtime, in the application's output) --------------------------------------------------------
    def _rocr(self, line: str) -> list[KernelEvent]:
        m = _HW_EXCEPTION.search(line)
        if m:
            reason = m.group("reason")
            cause = FaultCause.HANG if "hang" in reason.lower() else FaultCause.APP_EXCEPTION
            return [KernelEvent(cause, line, kfd_node=int(m.group("node")), detail=reason or None, number=self.lines)]
        m = _ACCESS_FAULT.search(line)
        if m:
            return [
                KernelEvent(
                    FaultCause.PAGE_FAULT,
                    line,
                    kfd_node=int(m.group("node")),
                    address=m.group("addr"),
                    detail=m.group("reason") or None,
                    number=self.lines,
                )
            ]
        return []

    # -- NVIDIA ---------------------------------------------------------------------------------------------------
    def _sxid(self, line: str) -> list[KernelEvent]:
        m = _SXID.search(line)
        if m is None:
            return []
        self._sxid_seen = f"{int(m.group('sxid'))} on {m.group('switch')}"
        detail = f"NVSwitch {m.group('switch')} SXid {int(m.group('sxid'))}: {m.group('rest')}"
        return [KernelEvent(FaultCause.NVLINK, line, bdf=m.group("bdf").lower(), detail=detail, number=self.lines)]

    def _nvidia(self, line: str) -> list[KernelEvent]:
        m = _XID.search(line)
        if m:
            code = int(m.group("xid"))
            cause, name = xid_cause(code)
            rest = m.group("rest")
            pid = process = None
            p = _XID_PID.match(rest)
            if p:
                pid = _pid(p.group("pid"))
                name_text = (p.group("name") or "").strip()
                process = None if not name_text or name_text.startswith("<") else name_text
                rest = rest[p.end() :]
                if code not in CHANNEL_XIDS and (pid is not None or process):
                    # the process that was calling into the driver, not the one whose work faulted
                    caller = " ".join(x for x in (process, f"pid {pid}" if pid else None) if x)
                    rest = f"{rest} (logged while {caller} was calling the driver, not its cause)"
                    pid = process = None
            if code == 45 and "caused by previous Xid" not in rest and self._sxid_seen is not None:
                rest = f"{rest} (after NVSwitch SXid {self._sxid_seen})"
            return [
                KernelEvent(
                    cause,
                    line,
                    bdf=_bdf(m.group("bus"), m.group("fn")) if m.group("bus") else None,
                    pid=pid,
                    process=process,
                    detail=f"Xid {code} ({name}): {rest}" if rest else f"Xid {code} ({name})",
                    xid=code,
                    number=self.lines,
                )
            ]
        b = _GSP_BANNER.search(line)
        if b:
            inst = b.group("inst")
            return [KernelEvent(FaultCause.HANG, line, detail=f"GSP timeout on driver GPU{inst}", number=self.lines)]
        g = _NV_GPU.search(line)
        if g:
            self._nv_bdf = _bdf(g.group("bus"), g.group("fn"))
        if _FALLEN in line and self._nv_bdf is not None:
            event = KernelEvent(
                FaultCause.FALLEN_OFF_BUS,
                line,
                bdf=self._nv_bdf,
                detail="GPU has fallen off the bus",
                number=self.lines,
            )
            self._nv_bdf = None
            return [event]
        return []


def _merge(held: KernelEvent, new: KernelEvent) -> KernelEvent | None:
    """``held`` with what ``new`` adds when both tell one fault (``None``: ``new`` is a fault of its own)."""
    if held.cause is FaultCause.RESET and new.cause is FaultCause.RESET:
        return held.with_(detail=new.detail if held.detail == "GPU reset" else held.detail)
    if held.cause in (FaultCause.RESET, FaultCause.RESET_FAILED) and new.cause is FaultCause.RESET_FAILED:
        return held.with_(cause=FaultCause.RESET_FAILED, detail=new.detail, line=new.line)
    if held.cause is FaultCause.RESET_FAILED and new.cause is FaultCause.RESET:
        return held  # "GPU reset succeeded, trying to resume"-style lines after a failure change nothing
    if (
        held.cause is FaultCause.APP_EXCEPTION
        and "command stream" in (held.detail or "")
        and new.cause is FaultCause.HANG
    ):
        return held.with_(detail=f"{held.detail}, then {new.detail}")
    return None


def parse_lines(lines: Iterable[str]) -> list[KernelEvent]:
    """Every fault in ``lines`` (a whole log), in the order their first lines came."""
    parser = KernelLogParser()
    events: list[KernelEvent] = []
    for line in lines:
        events += parser.feed(line)
    events += parser.flush()
    return sorted(events, key=lambda e: e.number)
