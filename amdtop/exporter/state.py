"""What the exporter publishes: one frozen :class:`ExportState` per poll.

The state gathers the node snapshot and whatever the other parts of amdtop know at that moment (workers from the
supervisor or discovery, analysis flags, probe bandwidths, ramp knees, RCCL log counts). Every part is optional so
that a headless exporter without workers still publishes the per-GPU metrics.
"""

from __future__ import annotations

from dataclasses import dataclass

from amdtop.health.throttle import ThrottleShare
from amdtop.health.traffic import FabricTraffic
from amdtop.model import Flag, NodeSnapshot, WorkerStatus


@dataclass(frozen=True, slots=True)
class RampKnee:
    """The knee the last load ramp found for a worker."""

    worker: str
    """Worker the ramp ran against."""
    concurrency: int
    """Concurrency at the knee."""
    recommended_max_num_seqs: int | None = None
    """``max-num-seqs`` the ramp recommended."""
    timestamp: float | None = None
    """When the ramp finished, seconds since the epoch."""


@dataclass(frozen=True, slots=True)
class RcclCounts:
    """Problems counted in one worker's RCCL/NCCL log lines."""

    worker: str
    """Worker whose logs were parsed."""
    errors: int
    """Error lines."""
    warnings: int = 0
    """Warning lines."""


@dataclass(frozen=True, slots=True)
class LinkBandwidth:
    """Bandwidth measured between two GPUs by the link probe."""

    a: int
    """Lower GPU index."""
    b: int
    """Higher GPU index."""
    gbps: float
    """Measured GB/s (10^9 bytes per second)."""


@dataclass(frozen=True, slots=True)
class ExportState:
    """Everything one scrape publishes."""

    snapshot: NodeSnapshot
    """The node sample (the same value the TUI draws)."""
    workers: tuple[WorkerStatus, ...] = ()
    """Workers known now (supervised or discovered)."""
    flags: tuple[Flag, ...] = ()
    """Analysis flags on top of the backend's own ``snapshot.flags``."""
    ramp_knees: tuple[RampKnee, ...] = ()
    """Last ramp knee per worker."""
    rccl: tuple[RcclCounts, ...] = ()
    """RCCL error/warning counts per worker."""
    bandwidth: tuple[LinkBandwidth, ...] = ()
    """Probe results per GPU pair; empty when no probe ran."""
    fabric: FabricTraffic | None = None
    """Live XGMI/NVLink rates over the last poll interval (``amdtop.health.traffic.latest_traffic``)."""
    throttle: tuple[ThrottleShare, ...] = ()
    """Share of the last window each GPU spent throttled (``amdtop.health.throttle.throttle_shares``)."""

    def all_flags(self) -> tuple[Flag, ...]:
        """Backend flags and analysis flags, each once."""
        # Keyed on identity fields, not the whole value: ``extra`` may hold unhashable values.
        seen: dict[tuple[object, ...], Flag] = {}
        for flag in (*self.snapshot.flags, *self.flags):
            seen.setdefault((flag.kind, flag.worker, flag.gpus, flag.metric, flag.message), flag)
        return tuple(seen.values())
