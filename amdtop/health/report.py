"""JSON shapes of the health values, for ``snapshot --json`` and the producer's frame; keys are additions only."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from amdtop.health.ecc import ecc_flags, ecc_rises
from amdtop.health.pairs import PairMemo
from amdtop.health.throttle import ThrottleShare, counter_step, flags_from_shares, throttle_flags, throttle_shares
from amdtop.health.traffic import FabricTraffic
from amdtop.model import Flag, GpuSample, NodeSnapshot


def gpu_health_json(sample: GpuSample, share: ThrottleShare | None = None) -> dict[str, Any]:
    """Keys to add to one GPU's object: ``throttle_active``, ``throttle_pct`` (reason -> % of the window),
    ``throttle_window_s``, ``ecc`` (per block) and ``xgmi_links`` (cumulative KB per link); ``None`` where unknown."""
    return {
        "throttle_active": None if sample.throttle_active is None else list(sample.throttle_active),
        "throttle_pct": None if share is None else {r: round(100.0 * v, 1) for r, v in share.shares},
        "throttle_window_s": None if share is None else round(share.window_s, 1),
        "ecc": None
        if sample.ecc is None
        else [
            {"block": e.block, "correctable": e.correctable, "uncorrectable": e.uncorrectable, "deferred": e.deferred}
            for e in sample.ecc
        ],
        "xgmi_links": None
        if sample.xgmi_links is None
        else [
            {"link": c.link, "peer_bdf": c.peer_bdf, "read_kb": c.read_kb, "write_kb": c.write_kb}
            for c in sample.xgmi_links
        ],
    }


def fabric_json(traffic: FabricTraffic | None) -> dict[str, Any] | None:
    """``fabric`` key of the snapshot document: rates over the last interval per GPU pair and per GPU (bytes/s)."""
    if traffic is None:
        return None
    return {
        "interval_s": round(traffic.interval_s, 3),
        "pairs": [
            {"src": p.src, "peer": p.peer, "read_bps": p.read_bps, "write_bps": p.write_bps} for p in traffic.pairs
        ],
        "gpus": [{"gpu": g.gpu, "read_bps": g.read_bps, "write_bps": g.write_bps} for g in traffic.gpus],
    }


def health_flags(history: Sequence[NodeSnapshot]) -> list[Flag]:
    """Every health flag for a history (oldest first): ``gpu_throttled`` over 10 s, ``ecc_uncorrectable`` over 60 s."""
    return [*throttle_flags(history), *ecc_flags(history)]


class HealthWindow:
    """The health judgements of a pipeline that adds one snapshot per tick: each interval's counter deltas are
    computed once (:class:`PairMemo`), the shares once per tick for both the flags and the frame."""

    def __init__(self) -> None:
        self._steps = PairMemo(counter_step)
        self._rises = PairMemo(ecc_rises)
        self._ecc_changed_at: float | None = None
        """Timestamp of the newest snapshot whose ECC counts differed from the one before it."""
        self._newest: NodeSnapshot | None = None

    def judge(self, history: Sequence[NodeSnapshot]) -> tuple[list[ThrottleShare], list[Flag]]:
        """(throttle shares, health flags) of ``history`` (oldest first, one snapshot added since the last call): the
        same as :func:`throttle_shares` and :func:`health_flags`."""
        shares = throttle_shares(history, step=self._steps)
        flags = flags_from_shares(shares)
        if history:
            newest = history[-1]
            if newest is not self._newest:
                # The first history is judged whole; after that, one new interval per call tells whether ECC moved.
                if self._newest is None or _ecc_changed(self._newest, newest):
                    self._ecc_changed_at = newest.timestamp
                self._newest = newest
            # ECC counts that never changed within the history cannot have risen: skip the minute of intervals.
            if self._ecc_changed_at is not None and self._ecc_changed_at > history[0].timestamp:
                flags += ecc_flags(history, rises_of=self._rises)
        self._steps.sweep()
        self._rises.sweep()
        return shares, flags


def _ecc_changed(old: NodeSnapshot, new: NodeSnapshot) -> bool:
    before = {g.index: g.ecc for g in old.gpus}
    return any(g.ecc != before.get(g.index) for g in new.gpus)
