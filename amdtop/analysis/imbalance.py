"""TP-group imbalance judged over a sliding time window.

A tensor-parallel group moves at the pace of its slowest rank, so a group whose GPUs differ in utilization or VRAM is
worth a flag. One poll is noisy; the tracker averages each GPU's metric over ``window_s`` seconds of snapshots before
computing the spread, so a single odd tick does not raise or clear the flag.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from amdtop.layout import TpGroupLayout
from amdtop.model import Flag, FlagKind, GpuSample, NodeSnapshot, WorkerState, WorkerStatus
from amdtop.thresholds import TP_SPREAD_THRESHOLD_PCT, TP_WINDOW_S, UTIL_IDLE_PCT

METRICS = ("util_pct", "vram_used_bytes")
_READ: dict[str, Callable[[GpuSample], float | int | None]] = {
    "util_pct": lambda s: s.util_pct,
    "vram_used_bytes": lambda s: s.vram_used_bytes,
}


def _value(snap: NodeSnapshot, gpu: int, metric: str) -> float | None:
    sample = snap.sample(gpu)
    if sample is None or sample.lost:
        return None
    value = _READ[metric](sample)
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


@dataclass(frozen=True, slots=True)
class GroupJudgement:
    """A TP group's spreads over the window: what the flag, the TP pane and the exporter all show."""

    worker: str
    """Worker whose group this is."""
    gpus: tuple[int, ...]
    """GPUs in rank order."""
    spreads: tuple[tuple[str, float | None], ...]
    """(metric, spread percent or ``None``) for each metric of :data:`METRICS`."""
    means: tuple[tuple[str, tuple[tuple[int, float], ...]], ...]
    """(metric, ((GPU, window mean), ...))."""
    samples: int
    """Snapshots in the window."""
    window_s: float
    """Window length."""
    lost: tuple[int, ...] = ()
    """GPUs of the group lost in the newest snapshot."""
    dp_rank: int | None = None
    """Data-parallel rank of the group when its worker has several (``None``: the worker is one TP group)."""

    @property
    def label(self) -> str:
        """``worker`` or ``worker/dp1`` for a replica of a data-parallel worker."""
        return self.worker if self.dp_rank is None else f"{self.worker}/dp{self.dp_rank}"

    def spread(self, metric: str) -> float | None:
        """Spread of ``metric``."""
        return dict(self.spreads).get(metric)

    def mean_of(self, metric: str) -> dict[int, float]:
        """Per-GPU window means of ``metric``."""
        return dict(dict(self.means).get(metric, ()))


class ImbalanceTracker:
    """Judges TP groups over the last ``window_s`` seconds and flags those whose GPUs differ by more than
    ``threshold_pct``."""

    def __init__(self, window_s: float = TP_WINDOW_S, threshold_pct: float = TP_SPREAD_THRESHOLD_PCT) -> None:
        """Keep snapshots of the last ``window_s`` seconds; flag spreads above ``threshold_pct``."""
        if window_s < 0:
            raise ValueError("window_s must be >= 0")
        self.window_s = window_s
        self.threshold_pct = threshold_pct
        self._snaps: deque[NodeSnapshot] = deque()

    def add(self, snapshot: NodeSnapshot) -> None:
        """Add ``snapshot`` to the window and drop what fell out of it."""
        self._snaps.append(snapshot)
        # Keep the newest snapshot even when the window is 0 (judge on one sample).
        while len(self._snaps) > 1 and snapshot.timestamp - self._snaps[0].timestamp > self.window_s:
            self._snaps.popleft()

    def update(self, snapshot: NodeSnapshot, workers: Sequence[WorkerStatus]) -> list[Flag]:
        """Add ``snapshot`` to the window and return the imbalance flags of ``workers``' TP groups now."""
        self.add(snapshot)
        return self.flags(workers)

    def judge(self, worker: WorkerStatus) -> GroupJudgement:
        """Spreads and means of all of ``worker``'s GPUs over the snapshots held now."""
        return self.judge_gpus(worker.name, tuple(worker.gpus))

    def judge_gpus(self, worker: str, gpus: tuple[int, ...], dp_rank: int | None = None) -> GroupJudgement:
        """Spreads and means of one TP group (``gpus`` of ``worker``) over the snapshots held now."""
        spreads: list[tuple[str, float | None]] = []
        means: list[tuple[str, tuple[tuple[int, float], ...]]] = []
        for metric in METRICS:
            spread, by_gpu = group_spreads(self._snaps, gpus, metric)
            spreads.append((metric, spread))
            means.append((metric, tuple(sorted(by_gpu.items()))))
        newest = self._snaps[-1] if self._snaps else None
        lost = tuple(g for g in gpus if newest is not None and ((s := newest.sample(g)) is None or s.lost))
        return GroupJudgement(
            worker, gpus, tuple(spreads), tuple(means), len(self._snaps), self.window_s, lost, dp_rank
        )

    def judge_groups(self, groups: Sequence[TpGroupLayout]) -> list[GroupJudgement]:
        """One judgement per TP group (:func:`amdtop.analysis.tp_groups.live_groups`); DP replicas each judged alone."""
        replicated = {g.worker for g in groups if g.first_rank > 0}
        return [self.judge_gpus(g.worker, g.gpus, g.dp_rank if g.worker in replicated else None) for g in groups]

    def judgements(self, workers: Sequence[WorkerStatus]) -> list[GroupJudgement]:
        """One judgement per TP group of the workers with GPUs that are not stopped (two for a DP=2 worker)."""
        groups = [g for w in workers if w.gpus and w.state is not WorkerState.STOPPED for g in w.tp_groups()]
        return self.judge_groups(groups)

    def flags_of(self, judgement: GroupJudgement) -> list[Flag]:
        """The ``tp_imbalance`` flags of one judged group (groups of one GPU are never imbalanced)."""
        out: list[Flag] = []
        if len(judgement.gpus) < 2:
            return out
        for metric in METRICS:
            spread = judgement.spread(metric)
            if spread is None or spread <= self.threshold_pct:
                continue
            means = judgement.mean_of(metric)
            lo = min(means, key=lambda g: means[g])
            hi = max(means, key=lambda g: means[g])
            label = "util" if metric == "util_pct" else "VRAM"
            out.append(
                Flag(
                    FlagKind.TP_IMBALANCE,
                    f"{judgement.label}: {label} spread {spread:.0f}% over {self.window_s:g}s "
                    f"(GPU {hi} highest, GPU {lo} lowest)",
                    worker=judgement.worker,
                    gpus=judgement.gpus,
                    metric=metric,
                    spread_pct=spread,
                    extra=(("window_s", self.window_s), ("samples", judgement.samples))
                    + ((("dp_rank", judgement.dp_rank),) if judgement.dp_rank is not None else ()),
                )
            )
        return out

    def flags(self, workers: Sequence[WorkerStatus]) -> list[Flag]:
        """Imbalance flags for ``workers`` over the snapshots held now."""
        return [f for j in self.judgements(workers) for f in self.flags_of(j)]
