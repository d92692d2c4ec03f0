"""Results of a link probe, and their JSON form (the state-dir cache and ``amdtop probe --json``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from amdtop.flag_json import flag_json
from amdtop.model import Flag


@dataclass(frozen=True, slots=True)
class CopyResult:
    """One directed copy: ``src`` GPU to ``dst`` GPU (``src == dst``: a copy inside one GPU's memory)."""

    src: int
    """Source GPU index."""
    dst: int
    """Destination GPU index."""
    size_bytes: int
    """Bytes per copy."""
    seconds: float
    """Median time of one copy."""

    @property
    def gbps(self) -> float:
        """Bandwidth in GB/s (1e9 bytes), bytes moved one way over time."""
        return self.size_bytes / self.seconds / 1e9 if self.seconds > 0 else 0.0


@dataclass(frozen=True, slots=True)
class AllReduceResult:
    """One all-reduce measurement over a group of GPUs at one size."""

    group: str
    """``all`` or the worker (TP group) name."""
    gpus: tuple[int, ...]
    """GPUs of the communicator, rank order."""
    size_bytes: int
    """Bytes reduced per rank."""
    seconds: float
    """Time of one all-reduce (slowest rank)."""
    algbw_gbps: float
    """size / time, GB/s."""
    busbw_gbps: float
    """nccl-tests bus bandwidth: algbw * 2(n-1)/n, GB/s."""


@dataclass(frozen=True, slots=True)
class ProbeResults:
    """A whole probe run."""

    timestamp: float
    """When the probe finished (epoch seconds)."""
    hostname: str
    """Host it ran on."""
    gpus: tuple[int, ...]
    """GPUs probed."""
    copies: tuple[CopyResult, ...] = ()
    """Directed copies."""
    allreduce: tuple[AllReduceResult, ...] = ()
    """All-reduce per group and size."""
    flags: tuple[Flag, ...] = field(default=())
    """``link_degraded`` flags raised from these numbers."""
    runner: str = "torch"
    """What measured it (``torch`` + library version, or ``fake`` in tests)."""

    def pair_gbps(self, a: int, b: int) -> float | None:
        """Measured GB/s between ``a`` and ``b``: the slower direction at the largest size measured (``None``: not)."""
        best_size = 0
        rates: dict[tuple[int, int], float] = {}
        for c in self.copies:
            if {c.src, c.dst} == {a, b} and (c.src != c.dst or a == b):
                if c.size_bytes > best_size:
                    best_size, rates = c.size_bytes, {}
                if c.size_bytes == best_size:
                    rates[(c.src, c.dst)] = c.gbps
        return min(rates.values()) if rates else None


def results_json(res: ProbeResults) -> dict[str, Any]:
    """The JSON document of a probe run."""
    return {
        "timestamp": res.timestamp,
        "hostname": res.hostname,
        "runner": res.runner,
        "gpus": list(res.gpus),
        "copies": [
            {"src": c.src, "dst": c.dst, "size_bytes": c.size_bytes, "seconds": c.seconds, "gbps": round(c.gbps, 3)}
            for c in res.copies
        ],
        "allreduce": [
            {
                "group": r.group,
                "gpus": list(r.gpus),
                "size_bytes": r.size_bytes,
                "seconds": r.seconds,
                "algbw_gbps": round(r.algbw_gbps, 3),
                "busbw_gbps": round(r.busbw_gbps, 3),
            }
            for r in res.allreduce
        ],
        "flags": [flag_json(f) for f in res.flags],
    }


def results_from_json(doc: dict[str, Any]) -> ProbeResults:
    """Inverse of :func:`results_json` (flags are kept as ``link_degraded`` flags).

    Raises:
        KeyError, TypeError, ValueError: the document is not a probe result.
    """
    from amdtop.model import FlagKind

    core = {"kind", "message", "gpus", "worker", "metric", "spread_pct"}
    flags = tuple(
        Flag(
            FlagKind(f["kind"]),
            str(f["message"]),
            gpus=tuple(int(g) for g in f.get("gpus", ())),
            extra=tuple((k, v) for k, v in f.items() if k not in core),
        )
        for f in doc.get("flags", [])
    )
    return ProbeResults(
        timestamp=float(doc["timestamp"]),
        hostname=str(doc["hostname"]),
        gpus=tuple(int(g) for g in doc["gpus"]),
        copies=tuple(
            CopyResult(int(c["src"]), int(c["dst"]), int(c["size_bytes"]), float(c["seconds"])) for c in doc["copies"]
        ),
        allreduce=tuple(
            AllReduceResult(
                str(r["group"]),
                tuple(int(g) for g in r["gpus"]),
                int(r["size_bytes"]),
                float(r["seconds"]),
                float(r["algbw_gbps"]),
                float(r["busbw_gbps"]),
            )
            for r in doc["allreduce"]
        ),
        flags=flags,
        runner=str(doc.get("runner", "torch")),
    )
