"""The ``ecc_uncorrectable`` flag: an uncorrectable RAS/ECC count that rose within the last window."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import pairwise

from amdtop.health.counters import window
from amdtop.model import EccCount, Flag, FlagKind, GpuSample, NodeSnapshot

DEFAULT_WINDOW_S = 60.0


def _by_block(ecc: tuple[EccCount, ...] | None) -> dict[str, int]:
    return {e.block: e.uncorrectable for e in ecc or () if e.uncorrectable is not None}


def ecc_rises(old: GpuSample, new: GpuSample) -> dict[str, int]:
    """Per block, how much the uncorrectable count rose between two samples of one GPU (a fall is a new baseline)."""
    if old.ecc == new.ecc:
        return {}
    before = _by_block(old.ecc)
    return {b: c - before[b] for b, c in _by_block(new.ecc).items() if b in before and c > before[b]}


def ecc_flags(
    history: Sequence[NodeSnapshot],
    window_s: float = DEFAULT_WINDOW_S,
    rises_of: Callable[[GpuSample, GpuSample], dict[str, int]] = ecc_rises,
) -> list[Flag]:
    """One flag per GPU whose uncorrectable count in some block is higher now than at the window's start.

    A count that went down (driver reload, counters cleared) is a new baseline, not an error; a GPU with no ECC data
    at either end raises nothing. ``rises_of`` computes one interval (a :class:`~amdtop.health.pairs.PairMemo` of
    :func:`ecc_rises` computes each interval once while the window slides).
    """
    snaps = window(history, window_s)
    if len(snaps) < 2:
        return []
    flags: list[Flag] = []
    for latest in snaps[-1].gpus:
        rises: dict[str, int] = {}
        for old_snap, new_snap in pairwise(snaps):
            old, new = old_snap.sample(latest.index), new_snap.sample(latest.index)
            if old is None or new is None or old.lost or new.lost:
                continue
            for block, rise in rises_of(old, new).items():
                rises[block] = rises.get(block, 0) + rise
        if not rises:
            continue
        now = _by_block(latest.ecc)
        parts = ", ".join(f"{n} in {b} (total {now.get(b, '?')})" for b, n in sorted(rises.items()))
        flags.append(
            Flag(
                FlagKind.ECC_UNCORRECTABLE,
                f"GPU {latest.index}: new uncorrectable ECC errors: {parts}",
                gpus=(latest.index,),
                metric="ecc_uncorrectable",
                extra=tuple(sorted(rises.items())),
            )
        )
    return flags
