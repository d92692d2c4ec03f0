"""Kernel-log verdicts over many lines: a hive reset (one GPU's uncorrectable error, then every GPU of the XGMI hive
reset and its VRAM lost), correctable error bursts and ACA/MCA records of the GPU that logged them, NVIDIA Xid chains
followed to their first cause, Xid 94 vs 95, and GPUs whose driver init failed.

:class:`KernelVerdicts` reads the same lines as :class:`amdtop.logread.kernel.parser.KernelLogParser` (cheap substring tests
first) and keeps what each verdict needs; :meth:`KernelVerdicts.incidents` builds them, placing devices on the node's
GPUs and workers.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from amdtop.logread.incidents.model import MAX_EVIDENCE, Incident
from amdtop.logread.kernel.events import LOST_ADVICE
from amdtop.logread.kernel.parser import _RESET_FAILED, _SXID
from amdtop.logread.kernel.pcie_corrected import CorrectedPcie
from amdtop.logread.kernel.xid import xid_cause, xid_fix
from amdtop.logread.nvidia_codes import nvidia_codes

_DEV = re.compile(r"\b(?:amdgpu|nvidia) (?P<bdf>[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]):")
_XID_DEV = re.compile(
    r"NVRM: Xid \((?:PCI:)?(?P<bus>[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2})(?:\.(?P<fn>[0-7]))?\): (?P<xid>\d+)"
)
_TS = re.compile(r"^\[\s*(?P<ts>\d+\.\d+)\]")
_MODE1 = re.compile(r"\b(?:GPU )?[Mm][Oo][Dd][Ee]1 reset\b")
_CORRECTABLE = re.compile(r"(?<!un)(?P<n>\d+) new correctable hardware errors? detected in (?P<block>\w+) block")
_UNCORRECTABLE = re.compile(r"(?<!no )\buncorrectable hardware error")
_ACA_STATUS = re.compile(
    r"\[Hardware Error\]: (?:aca|mca|ACA|MCA) entry\[(?P<n>\d+)\]\.STATUS=(?P<status>0x[0-9a-fA-F]+)"
)
_CAUSED_BY = re.compile(r"caused by previous Xid (?P<prev>\d+)")
_XID_PID = re.compile(r"pid=(?P<pid>\d+)")
_INIT_FAIL = (
    "Fatal error during GPU init",
    "early_init of IP block",
    "sw_init of IP block",
    "hw_init of IP block",
    "late_init of IP block",
    "ip discovery",
    "amdgpu_discovery_init failed",
    # amdgpu_device.c amdgpu_device_init: dev_err (drm_err since 6.x) "amdgpu_device_ip_init failed\n",
    # "amdgpu_device_ip_late_init failed\n", "amdgpu_fence_driver_sw_init failed\n": the GPU did not come up
    "amdgpu_device_ip_init failed",
    "amdgpu_device_ip_late_init failed",
    "amdgpu_fence_driver_sw_init failed",
)
# drivers/base/dd.c really_probe: pr_warn("%s: probe of %s failed with error %d\n", drv->name, dev_name(dev), ret):
# the line names the device in its text, not in a dev_* prefix
_PROBE = re.compile(
    r"\b(?:amdgpu|nvidia): probe of (?P<bdf>[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]) "
    r"failed with error (?P<err>-?\d+)"
)
# amdgpu_device.c amdgpu_device_ip_early_init / _ip_init / _ip_hw_init_phase1/2 / _ip_late_init:
# DRM_ERROR (dev_err since 6.x) "%s of IP block <%s> failed %d\n" with early_init, sw_init, hw_init, late_init; the
# BSDs' drm-kmod prints the same through "[drm ERROR :func]". The block and the code are the answer: a person names them.
_IP_BLOCK = re.compile(
    r"\b(?P<phase>early_init|sw_init|hw_init|late_init) of IP block <(?P<block>[^>]+)> failed (?P<err>-?\d+)"
)
_RESET_OK = re.compile(r"\bGPU reset\(\d+\) succeeded!")
# the ASIC reset itself, per SoC (nv.c, soc15.c, soc21.c *_asic_reset: dev_info(adev->dev, "PCI reset\n"), "BACO
# reset\n", "MODE2 reset\n", "MODE1 reset\n"; vi.c / cik.c: "BACO reset\n", "PCI CONFIG reset\n"): a reset under way
# even where the log starts after its "GPU reset begin!"
_RESET_METHOD = re.compile(r"[0-9a-fA-F]\.[0-7]: (?:amdgpu: )?(?:MODE[12]|BACO|PCI(?: CONFIG)?) reset\s*$")
# amdgpu_device.c amdgpu_do_asic_reset / amdgpu_device_reinit_after_reset and the mode2 handlers (aldebaran.c,
# sienna_cichlid.c, smu_v13_0_10.c): dev_info(..., "GPU reset succeeded, trying to resume\n"): the ASIC reset worked;
# the resume that follows can still fail, so this is not the outcome
_ASIC_RESET_OK = re.compile(r"\bGPU reset succeeded, trying to resume")
# smu_cmn.c / smu_v11_0.c / the powerplay hwmgrs: the SMU (the GPU's power-management firmware) not answering. After
# a reset has begun, these say the reset did not bring the GPU back.
_SMU_FAIL = re.compile(
    r"SMU: I'm not done with your previous command|SMU: response:0xFFFFFFFF|[Ff]ailed to send message"
    r"|failed send message|SMC engine is not correctly up|SMU is not ready"
)
_SMU_UNNAMED = re.compile(
    r"failed to send message|SMU Firmware start failed|[Ss][Mm][Uu] firmware loading failed|Failed to load SMU ucode"
)
"""Powerplay's SMU lines that name no device ("amdgpu:\n failed to send message %d ret is %d"): after a reset began
on one GPU, they are that GPU's."""
_RMINIT = re.compile(
    r"NVRM: GPU (?P<bdf>[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]): (?:RmInitAdapter|rm_init_adapter) failed"
)
_GSP_HEARTBEAT = re.compile(r"NVRM: (?:GPU(?P<inst>\d+) )?_kgsp\w+: (?:GSP RM |LibOS )?[Hh]eartbeat timed out")
# drivers/pci/pcie/aer.c: aer_isr_one_error "%s%s error received: %s" / "%s%s error message received from %s" (6.x)
# with "Multiple " and aer_error_severity_string "Uncorrected (Fatal)" (to 6.5) or "Uncorrectable (Fatal)" (6.6 on);
# aer_print_error "PCIe Bus Error: severity=%s, type=%s, (%s)"
_AER_FATAL = re.compile(
    r"^(?:.*?\] )?(?:pcieport )?(?P<port>[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]): "
    r"(?:AER: (?:Multiple )?Uncorrect(?:ed|able) \(Fatal\) error|PCIe Bus Error: severity=Uncorrect(?:ed|able) \(Fatal\))"
)
# drivers/pci/pcie/err.c pcie_do_recovery: "AER: Device recovery failed" (to 5.x), pci_info(bridge, "device recovery
# failed\n") under dev_fmt "AER: " (5.x on): the devices below the port are not recovered
_AER_FAILED = re.compile(r"AER: [Dd]evice recovery failed")
_AER_TLP = re.compile(r"\[\s*\d+\] (?P<what>[A-Z][A-Za-z ]+?)\s+\(First\)")
_CAUSE_LINE = re.compile(
    r"MES failed to respon(?:d to|se) msg=\S+|ring \S+ timeout, signaled seq=\d+|Illegal \w+(?: access)? in command stream"
    r"|page fault \(src_id|uncorrectable hardware error"
)
_NV_GPU = re.compile(
    r"NVRM: (?:The NVIDIA GPU|GPU at)\s+(?:PCI:)?(?P<bus>[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2})"
    r"(?:\.(?P<fn>[0-7]))?"
)
_XID_NAME = re.compile(r"name=(?P<name>[^,]*),")
_GSP_FROM = re.compile(r"from GPU(?P<inst>\d+) GSP")
# and kernel_gsp.c _kgspLogXid119 (5xx branches up to 580: NV_PRINTF "***... GSP Timeout ***", older "GSP Failure"), printed
# "NVRM: _kgspLogXid119: " with no GPU number: the Xid 119 line after it, or the "GPU at PCI:" header, names the GPU
_GSP_BANNER = re.compile(r"NVRM: (?:GPU(?P<inst>\d+) )?_kgspLog(?:RpcTimeout|Xid119): \*+ GSP (?:Timeout|Failure)")

MAX_KEYS = 64
"""Devices, blocks, codes... kept per verdict: what a node has, not what a hostile log could name (bug: 100k
distinct keys would be 100k incidents)."""
MAX_INCIDENTS = 64
"""Kernel verdicts reported at most (each already merges its repeats with a count)."""
MAX_EPISODES = 32
"""Reset episodes of different shapes kept (the same shape repeated is one episode with a count)."""

MAX_LINES = 64
"""Lines kept per verdict (a storm of ACA records is counted, its first lines kept)."""
EPISODE_GAP_S = 300.0
"""A reset line more than this after the last error/reset line starts a new episode: a hive reset is one burst of
lines within seconds, and the ring buffer since boot can hold several, hours apart, each its own incident."""


def decode_mca_status(value: int) -> dict[str, bool]:
    """The architectural bits of an MCA/ACA ``STATUS`` word (AMD SMCA, the x86 MCA layout): VAL 63, OVER 62, UC 61,
    EN 60, MISCV 59, ADDRV 58, PCC 57, Deferred 44, Poison 43."""
    return {
        "valid": bool(value >> 63 & 1),
        "overflow": bool(value >> 62 & 1),
        "uncorrected": bool(value >> 61 & 1),
        "enabled": bool(value >> 60 & 1),
        "context_corrupt": bool(value >> 57 & 1),
        "deferred": bool(value >> 44 & 1),
        "poison": bool(value >> 43 & 1),
    }


def mca_severity(bits: dict[str, bool]) -> str:
    """``fatal`` (UC and PCC: the processor context is corrupt), ``uncorrected``, ``deferred`` or ``corrected``."""
    if bits["uncorrected"] and bits["context_corrupt"]:
        return "fatal"
    if bits["uncorrected"]:
        return "uncorrected"
    if bits["deferred"]:
        return "deferred"
    return "corrected"


def _opens(xid: int) -> bool:
    """Whether Xid ``xid`` can be a GPU's first cause: the catalog's class says so (an Xid 45 cleanup, an Xid 154
    recovery summary or an Xid 171/172 detail of an Xid 48 only follow another error; a code the catalog lacks is
    taken as a cause)."""
    x = nvidia_codes().xid.get(xid)
    return x is None or x.cls == "cause"


@dataclass(slots=True)
class _Seen:
    lines: list[str] = field(default_factory=list)
    count: int = 0
    ts: float | None = None

    def add(self, line: str, n: int = 1, ts: float | None = None) -> None:
        self.count += n
        if self.ts is None:
            self.ts = ts
        if len(self.lines) < MAX_LINES:
            self.lines.append(line)


@dataclass(slots=True)
class _Episode:
    """One burst of uncorrectable errors and resets (lines within :data:`EPISODE_GAP_S` of each other)."""

    uncorrectable: dict[str, _Seen] = field(default_factory=dict)
    mode1: dict[str, _Seen] = field(default_factory=dict)
    vram_lost: _Seen = field(default_factory=_Seen)
    first: float | None = None
    last: float | None = None
    repeats: int = 1
    """Episodes of this shape it stands for (itself and the earlier ones merged into it)."""
    since: float | None = None
    """The first stamp of the earliest episode merged into it."""

    def shape(self) -> tuple[object, ...]:
        return (tuple(sorted(self.mode1)), tuple(sorted(self.uncorrectable)), self.vram_lost.count > 0)


@dataclass(slots=True)
class _Reset:
    """One GPU's resets as the driver told them: begun, succeeded, failed (and the SMU failing after a begin)."""

    state: str = "begun"
    """``begun`` (no outcome yet), ``ok`` or ``failed``: the last word the log had."""
    begun: int = 0
    ok: int = 0
    asic_ok: int = 0
    """"GPU reset succeeded, trying to resume" lines: the ASIC reset worked, the resume was under way."""
    failed: _Seen = field(default_factory=_Seen)
    first: _Seen = field(default_factory=_Seen)
    cause: str | None = None
    """What the GPU logged last before the reset began (a ring timeout, MES not answering...)."""


@dataclass(slots=True)
class _Gsp:
    """One GPU's GSP timeouts (Xid 119/120 lines, the driver's ``GSP Timeout`` banner)."""

    seen: _Seen = field(default_factory=_Seen)
    callers: dict[str, int] = field(default_factory=dict)
    instance: str | None = None


@dataclass(slots=True)
class _Aer:
    """A fatal PCIe error on a port, the GPUs the kernel named below it, and whether recovery failed."""

    seen: _Seen = field(default_factory=_Seen)
    gpus: list[str] = field(default_factory=list)
    what: str | None = None
    failed: bool = False


@dataclass(slots=True)
class _State:
    episodes: list[_Episode] = field(default_factory=list)
    correctable: dict[tuple[str, str], _Seen] = field(default_factory=dict)
    aca: dict[tuple[str, str], _Seen] = field(default_factory=dict)
    chains: dict[int, dict[str, _Seen]] = field(default_factory=dict)
    chain_pids: dict[int, set[int]] = field(default_factory=dict)
    ecc: dict[tuple[int, str], _Seen] = field(default_factory=dict)
    init_failed: dict[str, _Seen] = field(default_factory=dict)
    resets: dict[str, _Reset] = field(default_factory=dict)
    off_bus: dict[str, _Seen] = field(default_factory=dict)
    sxids: dict[tuple[str, str, int], _Seen] = field(default_factory=dict)
    last_sxid: tuple[str, str, int] | None = None
    after_sxid: dict[tuple[str, str, int], dict[str, _Seen]] = field(default_factory=dict)
    first_xid: dict[str, tuple[int, str]] = field(default_factory=dict)
    xid_seq: int = 0
    """Xid lines read so far: the order of a GPU's first Xid against its first cleanup naming an Xid 45."""
    first_xid_at: dict[str, int] = field(default_factory=dict)
    cleanup_at: dict[str, int] = field(default_factory=dict)
    """PCI address -> where its first "caused by previous Xid 45" line came: only an Xid before it can be the cause."""
    gsp: dict[str, _Gsp] = field(default_factory=dict)
    nv_bdf: str | None = None
    last_reset: str | None = None
    """The GPU whose reset began last (lines that name no device during it are its)."""
    causes: dict[str, str] = field(default_factory=dict)
    """PCI address -> the last line that could start a reset (a ring timeout, MES not answering, a fault)."""
    aer: dict[str, _Aer] = field(default_factory=dict)
    aer_port: str | None = None
    gsp_pending: _Gsp | None = None
    """GSP heartbeat lines, or a GSP Timeout banner, that named no GPU: the next Xid line names it."""
    gsp_hint: str | None = None
    """The GPU the driver's "GPU at PCI:..." report header named after such lines (its Xid line may be cut off)."""
    dropped: int = 0
    """Keys, episodes or incidents left out by the caps (said in the last incident's detail)."""


def _room(table: dict[Any, Any], key: object, s: _State) -> bool:
    """Whether ``key`` is in ``table`` or may join it (:data:`MAX_KEYS`); a refused key is counted as dropped."""
    if key in table or len(table) < MAX_KEYS:
        return True
    s.dropped += 1
    return False


Placer = Callable[[str], tuple[int | None, tuple[str, ...]]]
"""A device's PCI address to (its GPU index on this node, the workers on that GPU)."""


class KernelVerdicts:
    """Feed kernel lines in order; :meth:`incidents` judges what was read so far."""

    def __init__(self) -> None:
        self._s = _State()
        self._pcie = CorrectedPcie()

    def feed(self, line: str) -> None:
        """Read one line (cheap substring tests decide whether it matters)."""
        if self._pcie.wants(line):
            self._pcie.feed(line)  # corrected PCIe reports (AER, APEI GHES); the fatal ones are read below too
        if "NVRM" in line:
            self._nvrm(line)
            return
        if "SXid (" in line:
            self._sxid(line)
            return
        if "AER" in line or "PCIe Bus Error" in line or (self._s.aer_port is not None and "(First)" in line):
            self._aer(line)
            return
        if (
            self._s.last_reset is not None
            and ("essage" in line or "SMU" in line or "smu" in line)
            and _SMU_UNNAMED.search(line)
            and not _DEV.search(line)
        ):
            r = self._s.resets.get(self._s.last_reset)
            if r is not None and r.state != "ok":
                r.state = "failed"
                r.failed.add(line)
            return
        if "amdgpu" not in line and "[drm]" not in line:
            return
        if not (
            "reset" in line
            or "VRAM is lost" in line
            or "hardware error" in line
            or "Hardware Error" in line
            or "GPU init" in line
            or "IP block" in line
            or "probe of" in line
            or "discovery" in line
            or "SMU" in line
            or "SMC" in line
            or "message" in line
            or "ip_resume" in line
            or "init failed" in line
            or "MES failed" in line
            or "timeout, signaled" in line
            or "command stream" in line
            or "page fault" in line
        ):
            return
        dev = _DEV.search(line)
        bdf = dev.group("bdf").lower() if dev else ""
        t = _TS.match(line)
        ts = float(t.group("ts")) if t else None
        s = self._s
        if bdf:
            self._reset_state(line, bdf, ts)
            c = _CAUSE_LINE.search(line)
            if c and _room(s.causes, bdf, s):
                s.causes[bdf] = c.group(0)
        if "VRAM is lost" in line:
            self._episode(ts).vram_lost.add(line, ts=ts)
        elif _MODE1.search(line):
            self._episode(ts).mode1.setdefault(bdf, _Seen()).add(line, ts=ts)
        elif (m := _CORRECTABLE.search(line)) is not None:
            s.correctable.setdefault((bdf, m.group("block").lower()), _Seen()).add(line, int(m.group("n")), ts)
        elif (m := _ACA_STATUS.search(line)) is not None:
            severity = mca_severity(decode_mca_status(int(m.group("status"), 16)))
            s.aca.setdefault((bdf, severity), _Seen()).add(line, ts=ts)
        elif _UNCORRECTABLE.search(line):
            self._episode(ts).uncorrectable.setdefault(bdf, _Seen()).add(line, ts=ts)
        elif (m := _PROBE.search(line)) is not None:
            named = m.group("bdf").lower()
            if _room(s.init_failed, named, s):
                s.init_failed.setdefault(named, _Seen()).add(line, ts=ts)
        elif any(mark in line for mark in _INIT_FAIL) and _room(s.init_failed, bdf, s):
            s.init_failed.setdefault(bdf, _Seen()).add(line, ts=ts)

    def _reset_state(self, line: str, bdf: str, ts: float | None) -> None:
        """Follow one GPU's reset to its outcome: "GPU reset(N) succeeded!" brings it back; a failure line, or the SMU
        not answering after a reset began, leaves it lost until a later success."""
        s = self._s
        r = s.resets.get(bdf)
        failed = _RESET_FAILED.search(line)
        if failed or "GPU reset begin!" in line or _MODE1.search(line) or _RESET_METHOD.search(line):
            if r is None:
                if not _room(s.resets, bdf, s):
                    return
                r = s.resets[bdf] = _Reset(begun=1)
                r.first.add(line, ts=ts)
                r.cause = s.causes.get(bdf)
                if "GPU reset begin!" in line:
                    s.last_reset = bdf
                if not failed:
                    return
            if failed:
                r.state = "failed"
                r.failed.add(line, ts=ts)
            elif r.begun and ("GPU reset begin!" in line or r.state == "ok"):
                r.begun += 1
                r.state = "begun"
                r.first.add(line, ts=ts)
            if "GPU reset begin!" in line:
                s.last_reset = bdf
                if r.cause is None and bdf in s.causes:
                    r.cause = s.causes[bdf]
            return
        if r is None:
            return
        if _RESET_OK.search(line):
            r.ok += 1
            r.state = "ok"
        elif _ASIC_RESET_OK.search(line):
            r.asic_ok += 1
        elif r.state != "ok" and _SMU_FAIL.search(line):
            r.state = "failed"
            r.failed.add(line, ts=ts)

    def _episode(self, ts: float | None) -> _Episode:
        """The episode a line stamped ``ts`` belongs to: the current one, or a new one after a quiet gap (a line
        without a stamp joins the current one)."""
        eps = self._s.episodes
        if not eps or (ts is not None and eps[-1].last is not None and ts - eps[-1].last > EPISODE_GAP_S):
            if eps:
                self._compact(eps)
            eps.append(_Episode())
        ep = eps[-1]
        if ts is not None:
            ep.first = ts if ep.first is None else ep.first
            ep.last = ts
        return ep

    def _compact(self, eps: list[_Episode]) -> None:
        """The episode just closed (``eps[-1]``) against the kept ones: of each shape, the first and the latest are
        kept, and the latest counts those between; shapes beyond :data:`MAX_EPISODES` drop the oldest."""
        done = eps[-1]
        same = [i for i, ep in enumerate(eps[:-1]) if ep.shape() == done.shape()]
        if len(same) >= 2:
            latest = eps.pop(same[-1])
            done.repeats += latest.repeats
            done.since = latest.since if latest.since is not None else latest.first
        while len(eps) > MAX_EPISODES:
            eps.pop(0)
            self._s.dropped += 1

    def _nvrm(self, line: str) -> None:
        s = self._s
        if "NVRM: Xid" in line:
            self._xid(line)
            return
        r = _RMINIT.search(line)
        if r:
            bdf = r.group("bdf").lower()
            if _room(s.init_failed, bdf, s):
                s.init_failed.setdefault(bdf, _Seen()).add(line)
            return
        h = _GSP_HEARTBEAT.search(line)
        if h:
            inst = h.group("inst")
            if inst is None:
                s.gsp_pending = s.gsp_pending or _Gsp()
                s.gsp_pending.seen.add(line)
            elif _room(s.gsp, f"GPU{inst}", s):
                s.gsp.setdefault(f"GPU{inst}", _Gsp(instance=inst)).seen.add(line)
            return
        g = _NV_GPU.search(line)
        if g:
            s.nv_bdf = f"{g.group('bus').lower()}.{g.group('fn') or '0'}"
            if s.gsp_pending is not None and s.gsp_hint is None:
                s.gsp_hint = s.nv_bdf  # the report header after an unnamed GSP banner: the GPU it is about
        if "fallen off the bus" in line and s.nv_bdf is not None:
            if _room(s.off_bus, s.nv_bdf, s):
                s.off_bus.setdefault(s.nv_bdf, _Seen()).add(line)
            s.nv_bdf = None
            return
        b = _GSP_BANNER.search(line)
        if b and b.group("inst") is None:
            s.gsp_pending = s.gsp_pending or _Gsp()
            s.gsp_pending.seen.add(line)
        elif b:
            key = f"GPU{b.group('inst')}"
            if _room(s.gsp, key, s):
                gsp = s.gsp.setdefault(key, _Gsp(instance=b.group("inst")))
                gsp.seen.add(line)

    def _aer(self, line: str) -> None:
        """PCIe AER (drivers/pci/pcie/aer.c, err.c): a fatal error on a port, the drivers below it, the recovery."""
        s = self._s
        m = _AER_FATAL.search(line)
        if m:
            port = m.group("port").lower()
            if _room(s.aer, port, s):
                s.aer.setdefault(port, _Aer()).seen.add(line)
                s.aer_port = port
            return
        a = s.aer.get(s.aer_port) if s.aer_port is not None else None
        if a is None:
            return
        t = _AER_TLP.search(line)
        if t and a.what is None:
            a.what = t.group("what").strip()
        dev = _DEV.search(line)
        if dev and dev.group("bdf").lower() not in a.gpus and len(a.gpus) < MAX_KEYS:
            # err.c names each device below the port under its driver: "amdgpu <bdf>: device has no AER-aware
            # driver" (to 4.x), "nvidia <bdf>: AER: can't recover (no error_detected callback)" (5.x on): the GPU
            a.gpus.append(dev.group("bdf").lower())
        if _AER_FAILED.search(line):
            a.failed = True
            a.seen.add(line)

    def _sxid(self, line: str) -> None:
        m = _SXID.search(line)
        if m is None:
            return
        key = (m.group("switch"), m.group("bdf").lower(), int(m.group("sxid")))
        s = self._s
        if _room(s.sxids, key, s):
            s.sxids.setdefault(key, _Seen()).add(line)
        s.last_sxid = key

    def _xid(self, line: str) -> None:
        m = _XID_DEV.search(line)
        if m is None:
            return
        bdf = f"{m.group('bus').lower()}.{m.group('fn') or '0'}"
        xid = int(m.group("xid"))
        t = _TS.match(line)
        ts = float(t.group("ts")) if t else None
        s = self._s
        if s.gsp_pending is not None and _room(s.gsp, bdf, s):
            # heartbeat lines that named no GPU, then this GPU's Xid (154: "GPU Reset Required"): they were its
            held = s.gsp.setdefault(bdf, _Gsp())
            for ln in s.gsp_pending.seen.lines:
                # a GSP Timeout banner heads the Xid 119 line that follows it: one timeout, counted once
                held.seen.add(ln, 0 if _GSP_BANNER.search(ln) else 1)
            s.gsp_pending = None
            s.gsp_hint = None
        s.xid_seq += 1
        if _opens(xid) and bdf not in s.first_xid and _room(s.first_xid, bdf, s):
            s.first_xid[bdf] = (xid, line)
            s.first_xid_at[bdf] = s.xid_seq
        prev = _CAUSED_BY.search(line)
        if prev:
            code = int(prev.group("prev"))
            if code == 45 and bdf not in s.cleanup_at and len(s.cleanup_at) < MAX_KEYS:
                s.cleanup_at[bdf] = s.xid_seq
            if _room(s.chains, code, s):
                s.chains.setdefault(code, {}).setdefault(bdf, _Seen()).add(line, ts=ts)
            pid = _XID_PID.search(line)
            if pid and len(s.chain_pids.setdefault(code, set())) < MAX_KEYS:
                s.chain_pids[code].add(int(pid.group("pid")))
        elif xid == 45 and s.last_sxid is not None:
            # a cleanup after an NVSwitch error, with no Xid named: the switch's error is the cause
            by = s.after_sxid.setdefault(s.last_sxid, {})
            if _room(by, bdf, s):
                by.setdefault(bdf, _Seen()).add(line, ts=ts)
        elif xid in (94, 95):
            if _room(s.ecc, (xid, bdf), s):
                s.ecc.setdefault((xid, bdf), _Seen()).add(line, ts=ts)
        elif xid in (119, 120):
            if not _room(s.gsp, bdf, s):
                return
            gsp = s.gsp.setdefault(bdf, _Gsp())
            gsp.seen.add(line, ts=ts)
            inst = _GSP_FROM.search(line)
            if inst:
                gsp.instance = inst.group("inst")
            name = _XID_NAME.search(line)
            caller = (name.group("name").strip() if name else "") or "?"
            if not caller.startswith("<") and (caller in gsp.callers or len(gsp.callers) < MAX_KEYS):
                gsp.callers[caller] = gsp.callers.get(caller, 0) + 1
        elif xid == 79 and _room(s.off_bus, bdf, s):
            s.off_bus.setdefault(bdf, _Seen()).add(line, ts=ts)

    @property
    def expects_unnamed(self) -> bool:
        """Whether lines that name no device can matter now (a reset began: powerplay's SMU lines; a fatal PCIe error:
        the AER detail lines)."""
        return self._s.last_reset is not None or self._s.aer_port is not None

    @property
    def init_failures(self) -> dict[str, tuple[str, ...]]:
        """PCI address -> the kernel's own lines about its failed driver init (``""``: lines that named no device)."""
        return {bdf: tuple(seen.lines) for bdf, seen in self._s.init_failed.items()}

    def incidents(self, place: Placer, *, init_failed: bool = True) -> tuple[Incident, ...]:
        """Every verdict so far; ``place`` puts a PCI address on the node's GPUs and workers. ``init_failed``: also
        judge the GPUs whose driver init failed from the log alone (the monitor judges them against the PCI bus)."""
        out: list[Incident] = []
        out += self._lost(place)
        out += self._hive(place)
        out += self._resets(place)
        if init_failed:
            out += self._init(place)
        out += self._correctable(place)
        out += self._aca(place)
        out += self._sxid_incidents(place)
        out += self._chains(place)
        out += self._ecc(place)
        out += self._gsp(place)
        out += self._aer_incidents(place)
        if (pcie := self._pcie.incident()) is not None:
            out.append(pcie)
        dropped = self._s.dropped + max(0, len(out) - MAX_INCIDENTS)
        out = out[:MAX_INCIDENTS]
        if dropped and out:
            last = out[-1]
            out[-1] = replace(last, detail=(*last.detail, ("left_out", dropped)))
        return tuple(out)

    # -- verdicts ---------------------------------------------------------------------------------------------------
    def _lost_bdfs(self) -> dict[str, str]:
        """PCI address -> why the GPU is lost (its reset failed, it fell off the bus)."""
        why = {b: "fell off the bus" for b in self._s.off_bus}
        for b, r in self._s.resets.items():
            if r.state == "failed":
                first = next((ln for ln in r.failed.lines if _RESET_FAILED.search(ln)), r.failed.lines[0])
                m = _RESET_FAILED.search(first)
                why.setdefault(b, f"its reset failed ({m.group(0) if m else _short(first)})")
        return why

    def _lost(self, place: Placer) -> list[Incident]:
        why = self._lost_bdfs()
        if not why:
            return []
        bdfs = sorted(why)
        gpus, workers = _placed(bdfs, place)
        gone = sorted({w for ws in workers.values() for w in ws})
        where = "; ".join(f"{_name(b, gpus)}: {why[b]}" for b in bdfs)
        n = len(bdfs)
        summary = f"{n} GPU{'s' if n != 1 else ''} lost ({where})"
        if gone:
            summary += f"; workers lost: {', '.join(gone)}"
        failed = [b for b in bdfs if b not in self._s.off_bus]
        cause = (
            "the driver reset the GPU and the reset did not bring it back (the reset or the resume after it failed, "
            "or the SMU stopped answering): the GPU no longer runs work"
            if failed
            else "the GPU stopped answering on PCIe (fallen off the bus): a hardware, power or link failure"
        )
        evidence: list[str] = []
        for b in bdfs:
            r = self._s.resets.get(b)
            if r is not None:
                evidence += r.first.lines[:1] + r.failed.lines[:1]
            evidence += self._s.off_bus[b].lines[:1] if b in self._s.off_bus else []
        first = min((r.first.ts for b in bdfs if (r := self._s.resets.get(b)) and r.first.ts is not None), default=None)
        return [
            Incident(
                kind="gpu_lost",
                summary=summary,
                cause=cause,
                fix=LOST_ADVICE,
                evidence=tuple(dict.fromkeys(evidence))[:MAX_EVIDENCE],
                devices=tuple(sorted(g for g in gpus.values() if g is not None)),
                detail=(
                    ("bdfs", tuple(bdfs)),
                    ("why", tuple(why[b] for b in bdfs)),
                    ("per_gpu", tuple((b, gpus.get(b), workers.get(b, ())) for b in bdfs)),
                    ("workers", tuple(gone)),
                    ("first_ts", first),
                ),
            )
        ]

    def _resets(self, place: Placer) -> list[Incident]:
        """Resets of one GPU that a MODE1 episode does not already tell, and that did not leave it lost."""
        in_episode = {b for ep in self._s.episodes for b in ep.mode1}
        out = []
        for b, r in self._s.resets.items():
            if r.state == "failed" or b in in_episode:
                continue
            gpu, workers = place(b)
            who = _name(b, {b: gpu})
            outcome = (
                "it came back"
                if r.state == "ok"
                else "the ASIC reset itself succeeded; the log ends while the driver resumed it"
                if r.asic_ok
                else "the log holds no outcome yet"
            )
            times = f"{r.begun} times" if r.begun != 1 else "once"
            after = f" after {r.cause}" if r.cause else ""
            out.append(
                Incident(
                    kind="gpu_reset",
                    summary=f"{who} was reset {times}{after} ({outcome}): the work on it at each reset was lost"
                    + (f"; workers on it: {', '.join(workers)}" if workers else ""),
                    cause=f"the driver reset the GPU to recover from {r.cause}"
                    if r.cause
                    else "the driver reset the GPU to recover from a hang or fault (no line before the reset names it)",
                    fix="restart the work that ran on the GPU; if resets repeat, find the hang that starts them",
                    evidence=tuple(r.first.lines[:MAX_EVIDENCE]),
                    devices=() if gpu is None else (gpu,),
                    detail=(
                        ("bdf", b),
                        ("resets", r.begun),
                        ("succeeded", r.ok),
                        ("workers", workers),
                        ("first_ts", r.first.ts),
                    ),
                )
            )
        return out

    def _init(self, place: Placer) -> list[Incident]:
        named = {b: seen for b, seen in self._s.init_failed.items() if b}
        unnamed = self._s.init_failed.get("")
        if not named and unnamed is None:
            return []
        bdfs = sorted(named)
        gpus, _workers = _placed(bdfs, place)
        lines = [ln for b in bdfs for ln in named[b].lines] + (unnamed.lines if unnamed else [])
        codes = {b: m.group("err") for b in bdfs for ln in named[b].lines if (m := _PROBE.search(ln))}
        where = ", ".join(_name(b, gpus) + (f" (probe error {codes[b]})" if b in codes else "") for b in bdfs)
        n = len(bdfs)
        summary = f"{n} GPU{'s' if n != 1 else ''} failed driver init: {where}" if bdfs else "a GPU failed driver init"
        blocks = tuple(
            dict.fromkeys(
                f"{m.group('phase')} of IP block <{m.group('block')}> failed {m.group('err')}"
                for ln in lines
                if (m := _IP_BLOCK.search(ln))
            )
        )
        if blocks:
            summary += ("; " if bdfs else ": ") + ", ".join(blocks[:4])
        text = "\n".join(lines)
        if "ip discovery" in text or "discovery_init" in text:
            cause = (
                "the IP discovery table read from the GPU was invalid (bad signature or checksum): the driver "
                "cannot tell which blocks the GPU has, so it does not bring the GPU up"
            )
            fix = (
                "power-cycle the node (a full power off, not a warm reboot); if it repeats, update the GPU's "
                "firmware/VBIOS and the driver, and check the card's seating and power"
            )
        elif "RmInitAdapter failed" in text:
            cause = (
                "the NVIDIA driver could not initialize the GPU (RmInitAdapter failed): after a link retrain "
                "or an Xid 79 the GPU does not answer as it should"
            )
            fix = (
                "power-cycle the node (not a warm reboot); check the GPU's PCIe link, power and seating; "
                "replace the GPU if it repeats"
            )
        elif "<psp>" in text or "PSP" in text:
            cause = "the GPU's firmware (PSP) did not come up: its init failed in the driver"
            fix = "a full power cycle of the node (power off, wait, power on), not a warm reboot"
        elif blocks:
            first = _IP_BLOCK.search(next(ln for ln in lines if _IP_BLOCK.search(ln)))
            assert first is not None
            cause = (
                f"the {first.group('phase')} of the GPU's {first.group('block')} IP block failed with error "
                f"{first.group('err')} (a negative errno), so the driver did not bring the GPU up"
            )
            fix = (
                "look up the block and the error (-2: its firmware file is missing; a timeout: the block did not "
                "answer): install the firmware for this GPU, or disable the block if it is optional (e.g. "
                "amdgpu.ip_block_mask); power-cycle the node if it follows a hang"
            )
        else:
            cause = "the driver's init of the GPU failed" + (
                f" (error {', '.join(sorted(set(codes.values())))})" if codes else ""
            )
            fix = "read the kernel's lines before the failure for the block that failed; power-cycle the node"
        return [
            Incident(
                kind="gpu_init_failed",
                summary=summary,
                cause=cause,
                fix=fix,
                evidence=tuple(dict.fromkeys(lines))[:MAX_EVIDENCE],
                devices=tuple(sorted(g for g in gpus.values() if g is not None)),
                detail=(("bdfs", tuple(bdfs)), ("errors", tuple(codes.get(b) for b in bdfs)), ("ip_blocks", blocks)),
            )
        ]

    def _sxid_incidents(self, place: Placer) -> list[Incident]:
        out = []
        for (switch, bdf, code), seen in self._s.sxids.items():
            fatal = "Non-fatal" not in seen.lines[0] and "Fatal" in seen.lines[0]
            n = seen.count
            known = nvidia_codes().sxid.get(code)
            # the Fabric Manager guide's row for the code where it has one: its name, impact and recovery
            cause = f"an NVSwitch (NVLink fabric) error, SXid {code}" + (
                f" ({known.name}): {known.impact}"
                if known is not None
                else ": the GPUs' NVLink traffic through that switch "
                + ("stalls; their jobs are aborted (Xid 45)" if fatal else "may be degraded")
            )
            fix = (
                f"{known.recovery} (NVIDIA Fabric Manager user guide, SXid {code})"
                if known is not None
                else f"look up SXid {code} in NVIDIA's NVSwitch error catalog (Fabric Manager user guide); a fatal "
                "SXid needs the GPUs and switches reset (restart the jobs after a node reboot); a repeating one, the "
                "switch tray checked"
            )
            out.append(
                Incident(
                    kind="nvswitch_error",
                    summary=f"NVSwitch {switch} ({bdf}): SXid {code}"
                    + (f" ({known.name})" if known is not None else "")
                    + (f" x{n}" if n > 1 else "")
                    + (" (fatal)" if fatal else ""),
                    cause=cause,
                    fix=fix,
                    evidence=tuple(seen.lines[:MAX_EVIDENCE]),
                    detail=(("switch", switch), ("bdf", bdf), ("sxid", code), ("count", n)),
                )
            )
        for (switch, sbdf, code), by in self._s.after_sxid.items():
            bdfs = sorted(by)
            gpus, workers = _placed(bdfs, place)
            where = ", ".join(_name(b, gpus) for b in bdfs)
            first = self._s.sxids.get((switch, sbdf, code))
            out.append(
                Incident(
                    kind="xid_chain",
                    summary=f"Xid 45 on {where} after NVSwitch {switch} SXid {code}: the switch's error is the "
                    "first cause, the Xid 45 only cleaned up the channels it broke (not the application's fault)",
                    cause=f"NVSwitch SXid {code} on {switch} ({sbdf}): an NVLink fabric error",
                    fix="reset the GPUs and the switches (reboot the node), then restart the jobs; look up the SXid "
                    "in NVIDIA's NVSwitch error catalog",
                    evidence=tuple([*(first.lines[:1] if first else []), *(by[b].lines[0] for b in bdfs)])[
                        :MAX_EVIDENCE
                    ],
                    devices=tuple(sorted(g for g in gpus.values() if g is not None)),
                    detail=(
                        ("first_sxid", code),
                        ("switch", switch),
                        ("bdfs", tuple(bdfs)),
                        ("workers", tuple(sorted({w for ws in workers.values() for w in ws}))),
                    ),
                )
            )
        return out

    def _gsp(self, place: Placer) -> list[Incident]:
        records = dict(self._s.gsp)
        pending, hint = self._s.gsp_pending, self._s.gsp_hint
        if pending is not None and hint is not None and hint not in records:
            # a GSP Timeout banner whose Xid 119 line the log lost: the driver's report header after it names the GPU
            records[hint] = pending
        by_inst = {g.instance: b for b, g in records.items() if not b.startswith("GPU") and g.instance}
        # the GPUs whose GSP timed out, in the order the log first named them (the dict keeps first sight): each
        # incident names the others, so a read of any one says the node had several, and which came first
        hung = [k for k, g in records.items() if not (k.startswith("GPU") and g.instance in by_inst)]
        out = []
        for key, g in records.items():
            if key.startswith("GPU") and g.instance in by_inst:
                continue  # the banner of a GPU whose Xid 119 lines name it by address: told there
            others = [_gsp_name(k) for k in hung if k != key]
            also = ""
            if others:
                order = "this GPU's came first" if hung[0] == key else f"{_gsp_name(hung[0])}'s came first"
                also = f"; the GSP also timed out on {', '.join(others)} ({order})"
            bdf = key if not key.startswith("GPU") else None
            gpu, workers = place(bdf) if bdf else (None, ())
            who = _name(bdf, {bdf: gpu}) if bdf else f"driver GPU{g.instance} (the log names no PCI address)"
            devices: tuple[int, ...] = () if gpu is None else (gpu,)
            if bdf is None and g.instance is not None:
                devices = (int(g.instance),)  # the driver's GPU number: the only one its lines give
            n = len(g.callers)
            named_by = (
                " (its Xid 119 line is not in the log: the driver's 'GPU at' report header after the GSP Timeout "
                "banner names it)"
                if g is pending
                else ""
            )
            # the processes on Xid 119 lines were calling the driver when it timed out: counted, never named
            callers = (
                f"; the {n} process{'es' if n != 1 else ''} on its lines were only calling the driver: not the cause"
                if n
                else ""
            )
            out.append(
                Incident(
                    kind="gsp_timeout",
                    summary=f"GSP timeout on {who}"
                    + named_by
                    + (f" x{g.seen.count}" if g.seen.count > 1 else "")
                    + callers
                    + also,
                    cause="the GPU's System Processor (GSP firmware) stopped answering the driver (its heartbeat or "
                    "its RPCs timed out, Xid 119/120): the GPU is hung",
                    fix="drain the GPU and reset it (nvidia-smi -r, or reboot the node); update the driver if it "
                    "repeats (NVIDIA fixed GSP RPC timeouts in several branches)"
                    + (
                        "; several GPUs timing out together point at the node (NVLink/NVSwitch, host, driver)"
                        if others
                        else ""
                    ),
                    evidence=tuple(g.seen.lines[:MAX_EVIDENCE]),
                    devices=devices,
                    detail=(
                        ("bdf", bdf),
                        ("gsp_instance", g.instance),
                        ("callers", n),
                        ("count", g.seen.count),
                        ("other_gpus", tuple(others)),
                        ("workers", workers),
                    ),
                )
            )
        return out

    def _aer_incidents(self, place: Placer) -> list[Incident]:
        out = []
        for port, a in self._s.aer.items():
            gpus, workers = _placed(a.gpus, place)
            below = ", ".join(_name(b, gpus) for b in a.gpus) or "the devices below it"
            what = f" ({a.what})" if a.what else ""
            out.append(
                Incident(
                    kind="hardware_error",
                    summary=f"fatal PCIe error{what} at port {port}, above {below}"
                    + ("; device recovery failed: the GPU is not recovered" if a.failed else ""),
                    cause="an uncorrected fatal PCIe error on the GPU's link (a bad riser/cable/slot, signal "
                    "integrity, or the device itself)",
                    fix="drain the GPU and reboot the node; check the link (lspci -vv: LnkSta, AER counters), the "
                    "riser/cable and the slot; replace the part if it repeats",
                    evidence=tuple(a.seen.lines[:MAX_EVIDENCE]),
                    devices=tuple(sorted(g for g in gpus.values() if g is not None)),
                    detail=(
                        ("port", port),
                        ("bdfs", tuple(a.gpus)),
                        ("recovery_failed", a.failed),
                        ("workers", tuple(sorted({w for ws in workers.values() for w in ws}))),
                    ),
                )
            )
        return out

    def _hive(self, place: Placer) -> list[Incident]:
        if self._s.episodes:
            self._compact(self._s.episodes)  # the open episode too (idempotent: it merges once)
        lost = self._lost_bdfs()
        return [inc for n, ep in enumerate(self._s.episodes) if (inc := _hive_of(ep, n, place, lost)) is not None]

    def _correctable(self, place: Placer) -> list[Incident]:
        out = []
        for (bdf, block), seen in self._s.correctable.items():
            gpu, workers = place(bdf) if bdf else (None, ())
            who = _name(bdf, {bdf: gpu}) if bdf else "a GPU"
            out.append(
                Incident(
                    kind="correctable_errors",
                    summary=f"{seen.count} correctable errors in the {block} block of {who}",
                    cause=f"corrected by the hardware; a burst in {block} points at "
                    + ("an XGMI link (the fabric between GPUs)" if "xgmi" in block else f"the {block} block"),
                    fix="nothing to restart; watch the count (amd-smi metric --ecc-blocks) and drain the GPU if it "
                    "keeps rising or turns uncorrectable",
                    evidence=tuple(seen.lines[:MAX_EVIDENCE]),
                    devices=() if gpu is None else (gpu,),
                    detail=(("bdf", bdf), ("block", block), ("count", seen.count), ("workers", workers)),
                )
            )
        return out

    def _aca(self, place: Placer) -> list[Incident]:
        out = []
        for (bdf, severity), seen in self._s.aca.items():
            gpu, workers = place(bdf) if bdf else (None, ())
            who = _name(bdf, {bdf: gpu}) if bdf else "a GPU"
            bad = severity in ("fatal", "uncorrected")
            out.append(
                Incident(
                    kind="hardware_error",
                    summary=f"{seen.count} ACA/MCA record{'s' if seen.count != 1 else ''} on {who}: {severity} "
                    f"({'UC' if bad else 'not UC'}{', PCC' if severity == 'fatal' else ''} in STATUS)",
                    cause={
                        "fatal": "an uncorrected error that corrupted the processor context (UC and PCC set)",
                        "uncorrected": "an uncorrected error (UC set) the hardware contained",
                        "deferred": "a deferred error (poisoned data not yet consumed)",
                        "corrected": "corrected errors (UC clear): logged alongside another GPU's event",
                    }[severity],
                    fix="drain the GPU and check its RAS counts before reuse"
                    if bad
                    else "nothing to restart; look at the GPU whose uncorrectable error this accompanied",
                    evidence=tuple(seen.lines[:MAX_EVIDENCE]),
                    devices=() if gpu is None else (gpu,),
                    detail=(("bdf", bdf), ("severity", severity), ("records", seen.count), ("workers", workers)),
                )
            )
        return out

    def _chains(self, place: Placer) -> list[Incident]:
        out = []
        for named, by in self._s.chains.items():
            code = named
            if named == 45:
                # a cleanup naming an earlier cleanup is never its own cause: the first other Xid on those GPUs is,
                # if it came before the cleanups (an Xid after them is a later event, not their cause)
                s = self._s
                earlier = sorted(
                    (s.first_xid_at[b], x)
                    for b in by
                    if (x := s.first_xid.get(b)) is not None and s.first_xid_at[b] < s.cleanup_at.get(b, s.xid_seq + 1)
                )
                if not earlier:
                    out.append(_unknown_first(by, place, self._s.chain_pids.get(45, set())))
                    continue
                code = earlier[0][1][0]
            _cause, name = xid_cause(code)
            bdfs = sorted(by)
            gpus, _workers = _placed(bdfs, place)
            pids = sorted(self._s.chain_pids.get(named, ()))
            where = ", ".join(_name(b, gpus) for b in bdfs)
            lines = [ln for b in bdfs for ln in by[b].lines[:1]]
            if named != code:
                lines = [earlier[0][1][1], *lines]
            out.append(
                Incident(
                    kind="xid_chain",
                    summary=(
                        f"Xid 45 on {where} caused by previous Xid {code} ({name}): the Xid {code} is the cause, "
                        if named == code
                        else f"Xid 45 on {where} names an earlier Xid 45 as its cause; the first Xid on those GPUs, "
                        f"Xid {code} ({name}), is the cause, "
                    )
                    + f"the Xid 45 only cleaned up the channels of {len(pids)} process{'es' if len(pids) != 1 else ''}",
                    cause=f"Xid {code} ({name})"
                    + (": an NVLink error, a hardware/fabric fault" if 144 <= code <= 150 or code == 74 else ""),
                    fix=f"for Xid {code}, NVIDIA's resolution: "
                    + (xid_fix(code) or "none published; contact NVIDIA support if it repeats")
                    + (" (check the links with nvidia-smi nvlink -s/-e)" if 144 <= code <= 150 or code == 74 else "")
                    + "; the killed processes need a restart",
                    evidence=tuple(lines[:MAX_EVIDENCE]),
                    devices=tuple(sorted(g for g in gpus.values() if g is not None)),
                    detail=(("first_xid", code), ("bdfs", tuple(bdfs)), ("pids", tuple(pids))),
                )
            )
        return out

    def _ecc(self, place: Placer) -> list[Incident]:
        out = []
        for (xid, bdf), seen in self._s.ecc.items():
            gpu, workers = place(bdf)
            who = _name(bdf, {bdf: gpu})
            contained = xid == 94
            out.append(
                Incident(
                    kind="ecc",
                    summary=f"Xid {xid} on {who}: {'contained' if contained else 'uncontained'} ECC error",
                    cause="a contained ECC error: only the application that used the memory was hit"
                    if contained
                    else "an uncontained ECC error: any application on the GPU may have read corrupt data",
                    fix="restart the application; the GPU keeps serving (the row is remapped)"
                    if contained
                    else "drain the GPU: stop every workload on it and reset it (nvidia-smi -r) before reuse",
                    evidence=tuple(seen.lines[:MAX_EVIDENCE]),
                    devices=() if gpu is None else (gpu,),
                    detail=(("xid", xid), ("bdf", bdf), ("workers", workers)),
                )
            )
        return out


def _unknown_first(by: dict[str, _Seen], place: Placer, pids: set[int]) -> Incident:
    """Xid 45 lines that name an earlier Xid 45 when no other Xid on those GPUs is in the log: a consequence whose
    first cause the log does not hold (never "Xid 45 caused Xid 45")."""
    bdfs = sorted(by)
    gpus, _workers = _placed(bdfs, place)
    where = ", ".join(_name(b, gpus) for b in bdfs)
    return Incident(
        kind="xid_chain",
        summary=f"Xid 45 on {where} names an earlier Xid 45 (a cleanup) as its cause: the first cause is not in "
        "this log",
        cause="not in this log: an Xid 45 is a consequence (channels torn down after an earlier error or a killed "
        "process); the error that started it was logged before these lines",
        fix="read the kernel log further back (journalctl -k -b, or an older dmesg) for the first Xid on these GPUs",
        evidence=tuple(ln for b in bdfs for ln in by[b].lines[:1])[:MAX_EVIDENCE],
        devices=tuple(sorted(g for g in gpus.values() if g is not None)),
        detail=(("first_xid", None), ("bdfs", tuple(bdfs)), ("pids", tuple(sorted(pids)))),
    )


def _uncorrectable_of(ep: _Episode, place: Placer) -> Incident | None:
    """Uncorrectable errors with no reset in the lines read (yet): the GPU that logged them, its first line."""
    culprits = sorted(b for b in ep.uncorrectable if b)
    if not culprits:
        return None
    gpus, workers = _placed(culprits, place)
    where = ", ".join(_name(b, gpus) for b in culprits)
    first = [ep.uncorrectable[b].lines[0] for b in culprits]
    return Incident(
        kind="hardware_error",
        summary=f"uncorrectable hardware error on {where}: {_short(first[0])}",
        cause="the GPU's RAS reported an uncorrectable error: data on it may be corrupt; on an XGMI hive a MODE1 "
        "reset of every GPU usually follows",
        fix="drain the GPU and check its RAS counts (amd-smi metric --ecc) before reuse; restart the work on it",
        evidence=tuple(first)[:MAX_EVIDENCE],
        devices=tuple(sorted(g for g in gpus.values() if g is not None)),
        detail=(
            ("culprit_bdfs", tuple(culprits)),
            ("first_ts", ep.first),
            ("workers", tuple(sorted({w for ws in workers.values() for w in ws}))),
        ),
    )


def _short(line: str) -> str:
    """A kernel line without its stamp and device prefix."""
    text = line[line.find("]") + 1 :] if line.startswith("[") else line
    for cut in ("*ERROR* ", "amdgpu: "):
        i = text.rfind(cut)
        if i >= 0:
            text = text[i + len(cut) :]
    return text.strip()


def _hive_of(ep: _Episode, episode: int, place: Placer, lost: dict[str, str]) -> Incident | None:
    """One episode's reset verdict (``None``: a reset that lost every GPU it took, told by the lost verdict)."""
    if not ep.mode1:
        return _uncorrectable_of(ep, place)
    reset = sorted(b for b in ep.mode1 if b)
    if reset and all(b in lost for b in reset):
        return None
    culprits = sorted(b for b in ep.uncorrectable if b)
    gpus, workers = _placed(reset, place)
    gone = sorted({w for ws in workers.values() for w in ws})
    where = ", ".join(_name(b, gpus) for b in reset) or "a GPU"
    kind = "hive_reset" if len(reset) > 1 else "gpu_reset"
    head = f"MODE1 reset of {len(reset)} GPU{'s' if len(reset) != 1 else ''} ({where})"
    if culprits:
        head = f"{head} after an uncorrectable error on {', '.join(_name(b, gpus, place) for b in culprits)}"
    vram = "; VRAM lost" if ep.vram_lost.count else ""
    summary = f"{head}{vram}: the work on every reset GPU is gone"
    failed = [b for b in reset if b in lost]
    if failed:
        summary += f"; the reset did not bring back {', '.join(_name(b, gpus) for b in failed)} (lost)"
    if gone:
        summary += f"; workers gone: {', '.join(gone)}"
    if ep.repeats > 1:
        since = f" since [{ep.since:.1f}]" if ep.since is not None else ""
        summary += f" (the latest of {ep.repeats} resets like it{since})"
    cause = (
        f"an uncorrectable hardware error on {', '.join(_name(b, gpus, place) for b in culprits)}: a MODE1 reset "
        "takes the whole XGMI hive, so every GPU of it lost its work"
        if culprits
        else "a GPU hang or error the driver could not recover per queue: a MODE1 reset takes the whole XGMI hive"
    )
    fix = (
        "restart every worker on the reset GPUs (their contexts and VRAM are gone); drain the GPU that logged the "
        "uncorrectable error and check its RAS counts (amd-smi metric --ecc) before putting it back"
        if culprits
        else "restart every worker on the reset GPUs; find the hang that started it (the lines before the reset)"
    )
    evidence = [*(ln for b in culprits for ln in ep.uncorrectable[b].lines[:1])]
    evidence += [ln for b in reset[:3] for ln in ep.mode1[b].lines[:1]]
    evidence += ep.vram_lost.lines[:1]
    detail: tuple[tuple[str, object], ...] = (
        ("reset_bdfs", tuple(reset)),
        ("culprit_bdfs", tuple(culprits)),
        ("per_gpu", tuple((b, gpus.get(b), workers.get(b, ())) for b in reset)),
        ("vram_lost_lines", ep.vram_lost.count),
        ("episode", episode),
        ("first_ts", ep.first),
        ("repeats", ep.repeats),
        ("lost_bdfs", tuple(failed)),
    )
    return Incident(
        kind=kind,
        summary=summary,
        cause=cause,
        fix=fix,
        evidence=tuple(evidence)[:MAX_EVIDENCE],
        devices=tuple(sorted(g for g in gpus.values() if g is not None)),
        detail=(*detail, ("workers", tuple(gone))),
    )


def _placed(bdfs: Sequence[str], place: Placer) -> tuple[dict[str, int | None], dict[str, tuple[str, ...]]]:
    gpus: dict[str, int | None] = {}
    workers: dict[str, tuple[str, ...]] = {}
    for b in bdfs:
        gpus[b], workers[b] = place(b)
    return gpus, workers


def _gsp_name(key: str) -> str:
    """A GSP record's GPU as a verdict names it: its PCI address, or the driver's ``GPUn`` where no line gives one."""
    return key if not key.startswith("GPU") else f"driver {key}"


def _name(bdf: str, gpus: dict[str, int | None], place: Placer | None = None) -> str:
    gpu = gpus.get(bdf)
    if gpu is None and place is not None:
        gpu = place(bdf)[0]
    return f"GPU {gpu} ({bdf})" if gpu is not None else bdf
