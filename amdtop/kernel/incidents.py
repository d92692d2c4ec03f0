"""Kernel-log verdicts over many lines: a hive reset (one GPU's uncorrectable error, then every GPU of the XGMI hive
reset and its VRAM lost), correctable error bursts and ACA/MCA records of the GPU that logged them, NVIDIA Xid chains
followed to their first cause, Xid 94 vs 95, and GPUs whose driver init failed.

:class:`KernelVerdicts` reads the same lines as :class:`amdtop.kernel.parser.KernelLogParser` (cheap substring tests
first) and keeps what each verdict needs; :meth:`KernelVerdicts.incidents` builds them, placing devices on the node's
GPUs and workers.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from amdtop.incidents.model import MAX_EVIDENCE, Incident
from amdtop.kernel.xid import xid_cause

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
_INIT_FAIL = ("Fatal error during GPU init", "early_init of IP block", "sw_init of IP block", "hw_init of IP block")

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


@dataclass(slots=True)
class _State:
    episodes: list[_Episode] = field(default_factory=list)
    correctable: dict[tuple[str, str], _Seen] = field(default_factory=dict)
    aca: dict[tuple[str, str], _Seen] = field(default_factory=dict)
    chains: dict[int, dict[str, _Seen]] = field(default_factory=dict)
    chain_pids: dict[int, set[int]] = field(default_factory=dict)
    ecc: dict[tuple[int, str], _Seen] = field(default_factory=dict)
    init_failed: dict[str, _Seen] = field(default_factory=dict)


Placer = Callable[[str], tuple[int | None, tuple[str, ...]]]
"""A device's PCI address to (its GPU index on this node, the workers on that GPU)."""


class KernelVerdicts:
    """Feed kernel lines in order; :meth:`incidents` judges what was read so far."""

    def __init__(self) -> None:
        self._s = _State()

    def feed(self, line: str) -> None:
        """Read one line (cheap substring tests decide whether it matters)."""
        if "NVRM: Xid" in line:
            self._xid(line)
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
        ):
            return
        dev = _DEV.search(line)
        bdf = dev.group("bdf").lower() if dev else ""
        t = _TS.match(line)
        ts = float(t.group("ts")) if t else None
        s = self._s
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
        elif any(mark in line for mark in _INIT_FAIL):
            s.init_failed.setdefault(bdf, _Seen()).add(line, ts=ts)

    def _episode(self, ts: float | None) -> _Episode:
        """The episode a line stamped ``ts`` belongs to: the current one, or a new one after a quiet gap (a line
        without a stamp joins the current one)."""
        eps = self._s.episodes
        if not eps or (ts is not None and eps[-1].last is not None and ts - eps[-1].last > EPISODE_GAP_S):
            eps.append(_Episode())
        ep = eps[-1]
        if ts is not None:
            ep.first = ts if ep.first is None else ep.first
            ep.last = ts
        return ep

    def _xid(self, line: str) -> None:
        m = _XID_DEV.search(line)
        if m is None:
            return
        bdf = f"{m.group('bus').lower()}.{m.group('fn') or '0'}"
        xid = int(m.group("xid"))
        t = _TS.match(line)
        ts = float(t.group("ts")) if t else None
        prev = _CAUSED_BY.search(line)
        if prev:
            code = int(prev.group("prev"))
            self._s.chains.setdefault(code, {}).setdefault(bdf, _Seen()).add(line, ts=ts)
            pid = _XID_PID.search(line)
            if pid:
                self._s.chain_pids.setdefault(code, set()).add(int(pid.group("pid")))
        elif xid in (94, 95):
            self._s.ecc.setdefault((xid, bdf), _Seen()).add(line, ts=ts)

    @property
    def init_failures(self) -> dict[str, tuple[str, ...]]:
        """PCI address -> the kernel's own lines about its failed driver init (``""``: lines that named no device)."""
        return {bdf: tuple(seen.lines) for bdf, seen in self._s.init_failed.items()}

    def incidents(self, place: Placer) -> tuple[Incident, ...]:
        """Every verdict so far; ``place`` puts a PCI address on the node's GPUs and workers."""
        out: list[Incident] = []
        out += self._hive(place)
        out += self._correctable(place)
        out += self._aca(place)
        out += self._chains(place)
        out += self._ecc(place)
        return tuple(out)

    # -- verdicts ---------------------------------------------------------------------------------------------------
    def _hive(self, place: Placer) -> list[Incident]:
        return [inc for n, ep in enumerate(self._s.episodes) if (inc := _hive_of(ep, n, place)) is not None]

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
        for code, by in self._s.chains.items():
            _cause, name = xid_cause(code)
            bdfs = sorted(by)
            gpus, _workers = _placed(bdfs, place)
            pids = sorted(self._s.chain_pids.get(code, ()))
            where = ", ".join(_name(b, gpus) for b in bdfs)
            lines = [ln for b in bdfs for ln in by[b].lines[:1]]
            out.append(
                Incident(
                    kind="xid_chain",
                    summary=f"Xid 45 on {where} caused by previous Xid {code} ({name}): the Xid {code} is the cause, "
                    f"the Xid 45 only cleaned up the channels of {len(pids)} process{'es' if len(pids) != 1 else ''}",
                    cause=f"Xid {code} ({name})"
                    + (": an NVLink error, a hardware/fabric fault" if 144 <= code <= 150 or code == 74 else ""),
                    fix=f"follow NVIDIA's resolution for Xid {code} (NVLink: check the links with nvidia-smi nvlink "
                    "-s/-e, reset the GPUs, drain and test if it repeats); the killed processes need a restart",
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


def _hive_of(ep: _Episode, episode: int, place: Placer) -> Incident | None:
    """One episode's reset verdict (``None``: errors but no reset in it)."""
    if not ep.mode1:
        return None
    reset = sorted(b for b in ep.mode1 if b)
    culprits = sorted(b for b in ep.uncorrectable if b)
    gpus, workers = _placed(reset, place)
    gone = sorted({w for ws in workers.values() for w in ws})
    where = ", ".join(_name(b, gpus) for b in reset) or "a GPU"
    kind = "hive_reset" if len(reset) > 1 else "gpu_reset"
    head = f"MODE1 reset of {len(reset)} GPU{'s' if len(reset) != 1 else ''} ({where})"
    if culprits:
        head = f"{head} after an uncorrectable error on {', '.join(_name(b, gpus, place) for b in culprits)}"
    lost = "; VRAM lost" if ep.vram_lost.count else ""
    summary = f"{head}{lost}: the work on every reset GPU is gone"
    if gone:
        summary += f"; workers gone: {', '.join(gone)}"
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


def _name(bdf: str, gpus: dict[str, int | None], place: Placer | None = None) -> str:
    gpu = gpus.get(bdf)
    if gpu is None and place is not None:
        gpu = place(bdf)[0]
    return f"GPU {gpu} ({bdf})" if gpu is not None else bdf
