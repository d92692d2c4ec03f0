"""How much of the last window a GPU spent throttled, per reason, and the ``gpu_throttled`` flag.

Residency counters (gpu_metrics v1.6, amdsmi violation status, NVML violation time) give the share exactly:
counter delta over clock delta. Where a source only says which reasons are active at each poll (NVML clock-event
reasons, gpu_metrics v1.3's throttler bits), the share is the fraction of the window's time between polls that
ended with the reason active.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import pairwise

from amdtop.health.counters import counter_delta, window
from amdtop.model import Flag, FlagKind, GpuSample, NodeSnapshot

# Reasons that lower clocks because a limit was hit; ``idle``, ``app_clocks``, ``sync_boost`` and ``display`` are
# settings or benign and never raise the flag.
LIMIT_REASONS = frozenset(
    {
        "power_cap",
        "thermal",
        "prochot",
        "hbm_thermal",
        "vr_thermal",
        "socket_thermal",
        "hw_slowdown",
        "power_brake",
        "current",
        "board_limit",
        "reliability",
    }
)

REASON_TEXT = {
    "power_cap": "power-capped",
    "thermal": "thermally throttled",
    "prochot": "PROCHOT-throttled",
    "hbm_thermal": "HBM-thermal throttled",
    "vr_thermal": "VR-thermal throttled",
    "socket_thermal": "socket-thermal throttled",
    "hw_slowdown": "in HW slowdown",
    "power_brake": "power-braked",
    "current": "current-limited",
    "board_limit": "board-limited",
    "reliability": "reliability-limited",
    "sync_boost": "sync-boost limited",
}

DEFAULT_WINDOW_S = 10.0
DEFAULT_THRESHOLD = 0.2


@dataclass(frozen=True, slots=True)
class ThrottleShare:
    """One GPU's throttling over a window."""

    gpu: int
    window_s: float
    """Time the shares cover, s."""
    shares: tuple[tuple[str, float], ...]
    """(reason, share 0..1), highest first."""
    source: str
    """``counters`` (residency counters) or ``polls`` (active reasons seen at each poll)."""

    @property
    def worst(self) -> tuple[str, float] | None:
        """The limit reason with the largest share, if any."""
        limits = [(r, v) for r, v in self.shares if r in LIMIT_REASONS]
        return limits[0] if limits else None


CounterStep = tuple[float, dict[str, float]] | None
"""One interval of residency counters: (clock delta, delta per reason), or ``None`` when the interval is unknown."""


def counter_step(old: GpuSample, new: GpuSample) -> CounterStep:
    """The residency-counter deltas between two samples of one GPU (``None``: no counters, a reset, no clock tick)."""
    if old.throttle_clock is None or new.throttle_clock is None or not old.throttle_acc or not new.throttle_acc:
        return None
    dclock = counter_delta(old.throttle_clock, new.throttle_clock)
    if not dclock:
        return None  # reset, or the firmware did not tick
    before = dict(old.throttle_acc)
    deltas = {}
    for reason, value in new.throttle_acc:
        if reason in before:
            d = counter_delta(before[reason], value)
            if d is None:
                return None  # one counter reset: the whole interval is unknown
            deltas[reason] = d
    return dclock, deltas


def _from_counters(
    samples: list[tuple[float, GpuSample]], step: Callable[[GpuSample, GpuSample], CounterStep] = counter_step
) -> dict[str, float] | None:
    clock_total = 0.0
    sums: dict[str, float] = {}
    for (_, old), (_, new) in pairwise(samples):
        found = step(old, new)
        if found is None:
            continue
        dclock, deltas = found
        clock_total += dclock
        for reason, d in deltas.items():
            sums[reason] = sums.get(reason, 0.0) + d
    if clock_total <= 0:
        return None
    return {r: min(1.0, max(0.0, v / clock_total)) for r, v in sums.items()}


def _from_polls(samples: list[tuple[float, GpuSample]]) -> dict[str, float] | None:
    total = 0.0
    sums: dict[str, float] = {}
    for (t0, _), (t1, new) in pairwise(samples):
        if new.throttle_active is None or t1 <= t0:
            continue
        total += t1 - t0
        for reason in new.throttle_active:
            sums[reason] = sums.get(reason, 0.0) + (t1 - t0)
    if total <= 0:
        return None
    return {r: v / total for r, v in sums.items()}


def throttle_shares(
    history: Sequence[NodeSnapshot],
    window_s: float = DEFAULT_WINDOW_S,
    step: Callable[[GpuSample, GpuSample], CounterStep] = counter_step,
) -> list[ThrottleShare]:
    """Per GPU, the share of the last ``window_s`` seconds spent throttled per reason (GPUs with no data left out).

    ``step`` computes one interval's counter deltas: a :class:`~amdtop.health.pairs.PairMemo` of
    :func:`counter_step` lets a caller that slides the window tick by tick compute each interval once."""
    snaps = window(history, window_s)
    if len(snaps) < 2:
        return []
    span = snaps[-1].timestamp - snaps[0].timestamp
    out: list[ThrottleShare] = []
    for latest in snaps[-1].gpus:
        samples = [(snap.timestamp, s) for snap in snaps if (s := snap.sample(latest.index)) is not None and not s.lost]
        shares, source = _from_counters(samples, step), "counters"
        if shares is None:
            shares, source = _from_polls(samples), "polls"
        if shares is None:
            continue
        ordered = tuple(sorted(shares.items(), key=lambda kv: (-kv[1], kv[0])))
        out.append(ThrottleShare(latest.index, span, ordered, source))
    return out


def throttle_flags(
    history: Sequence[NodeSnapshot],
    window_s: float = DEFAULT_WINDOW_S,
    threshold: float = DEFAULT_THRESHOLD,
) -> list[Flag]:
    """A ``gpu_throttled`` flag for each GPU that spent at least ``threshold`` of the last window at a limit, e.g.
    ``GPU 3 power-capped 38 % of the last 10 s``."""
    return flags_from_shares(throttle_shares(history, window_s), threshold)


def flags_from_shares(shares: Sequence[ThrottleShare], threshold: float = DEFAULT_THRESHOLD) -> list[Flag]:
    """The ``gpu_throttled`` flags of shares already computed (see :func:`throttle_flags`)."""
    flags: list[Flag] = []
    for share in shares:
        worst = share.worst
        if worst is None or worst[1] < threshold:
            continue
        reason, value = worst
        pct = round(100.0 * value)
        flags.append(
            Flag(
                FlagKind.GPU_THROTTLED,
                f"GPU {share.gpu} {REASON_TEXT.get(reason, reason)} {pct} % of the last {share.window_s:.0f} s",
                gpus=(share.gpu,),
                metric="throttle",
                extra=(("reason", reason), ("share_pct", pct), ("window_s", round(share.window_s, 1))),
            )
        )
    return flags
