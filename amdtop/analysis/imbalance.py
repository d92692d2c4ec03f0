"""TP-group imbalance judged over a sliding time window.

A tensor-parallel group moves at the pace of its slowest rank, so a group whose GPUs differ in utilization or VRAM is
worth a flag. One poll is noisy; the tracker averages each GPU's metric over ``window_s`` seconds of snapshots before
computing the spread, so a single odd tick does not raise or clear the flag.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence

from amdtop.model import Flag, FlagKind, NodeSnapshot, WorkerStatus

METRICS = ("util_pct", "vram_used_bytes")

# Below this mean utilization a group is idle: tiny absolute differences (0.2% vs 1%) are not an imbalance.
UTIL_IDLE_PCT = 5.0


def _value(snap: NodeSnapshot, gpu: int, metric: str) -> float | None:
    sample = snap.sample(gpu)
    if sample is None or sample.lost:
        return None
    value = getattr(sample, metric)
    return None if value is None else float(value)


def spread_pct(values: Sequence[float]) -> float | None:
    """(max - min) / max in percent; ``None`` for fewer than two values or a zero maximum."""
    if len(values) < 2:
        return None
    hi, lo = max(values), min(values)
    if hi <= 0:
        return None
    return 100.0 * (hi - lo) / hi


def group_spreads(
    snaps: Iterable[NodeSnapshot], gpus: Sequence[int], metric: str
) -> tuple[float | None, dict[int, float]]:
    """Spread of the per-GPU window means of ``metric`` over ``gpus``, and those means.

    Args:
        snaps: Snapshots of the window.
        gpus: GPUs of the TP group.
        metric: A numeric :class:`~amdtop.model.GpuSample` field.

    Returns:
        The spread in percent (``None`` when it cannot be judged) and each GPU's mean.
    """
    sums: dict[int, float] = {}
    counts: dict[int, int] = {}
    for snap in snaps:
        for gpu in gpus:
            value = _value(snap, gpu, metric)
            if value is not None:
                sums[gpu] = sums.get(gpu, 0.0) + value
                counts[gpu] = counts.get(gpu, 0) + 1
    means = {gpu: sums[gpu] / counts[gpu] for gpu in sums}
    if metric == "util_pct" and means and max(means.values()) < UTIL_IDLE_PCT:
        return None, means
    return spread_pct(list(means.values())), means


class ImbalanceTracker:
    """Flags TP groups whose GPUs differ by more than ``threshold_pct`` over the last ``window_s`` seconds."""

    def __init__(self, window_s: float = 5.0, threshold_pct: float = 15.0) -> None:
        """Keep snapshots of the last ``window_s`` seconds; flag spreads above ``threshold_pct``."""
        if window_s < 0:
            raise ValueError("window_s must be >= 0")
        self.window_s = window_s
        self.threshold_pct = threshold_pct
        self._snaps: deque[NodeSnapshot] = deque()

    def update(self, snapshot: NodeSnapshot, workers: Sequence[WorkerStatus]) -> list[Flag]:
        """Add ``snapshot`` to the window and return the imbalance flags of ``workers``' TP groups now."""
        self._snaps.append(snapshot)
        # Keep the newest snapshot even when the window is 0 (judge on one sample).
        while len(self._snaps) > 1 and snapshot.timestamp - self._snaps[0].timestamp > self.window_s:
            self._snaps.popleft()
        return self.flags(workers)

    def flags(self, workers: Sequence[WorkerStatus]) -> list[Flag]:
        """Imbalance flags for ``workers`` over the snapshots held now."""
        out: list[Flag] = []
        for worker in workers:
            if len(worker.gpus) < 2:
                continue
            for metric in METRICS:
                spread, means = group_spreads(self._snaps, worker.gpus, metric)
                if spread is None or spread <= self.threshold_pct:
                    continue
                lo = min(means, key=lambda g: means[g])
                hi = max(means, key=lambda g: means[g])
                label = "util" if metric == "util_pct" else "VRAM"
                out.append(
                    Flag(
                        FlagKind.TP_IMBALANCE,
                        f"{worker.name}: {label} spread {spread:.0f}% over {self.window_s:g}s "
                        f"(GPU {hi} highest, GPU {lo} lowest)",
                        worker=worker.name,
                        gpus=tuple(worker.gpus),
                        metric=metric,
                        spread_pct=spread,
                        extra=(("window_s", self.window_s), ("samples", len(self._snaps))),
                    )
                )
        return out
