"""``link_degraded``: a GPU pair whose measured copy rate falls short of its link class or of its peers."""

from __future__ import annotations

from amdtop.model import Flag, FlagKind, Topology
from amdtop.probe.arith import expected_p2p_gbps
from amdtop.probe.model import ProbeResults

CLASS_FRACTION = 0.6
"""A pair under this fraction of its link class's expected rate is degraded."""
BEST_FRACTION = 0.75
"""A pair under this fraction of the node's best pair of the same link class is degraded."""


def degraded_links(
    results: ProbeResults,
    topology: Topology,
    class_fraction: float = CLASS_FRACTION,
    best_fraction: float = BEST_FRACTION,
) -> list[Flag]:
    """Flag pairs under ``class_fraction`` of their class expectation, or under ``best_fraction`` of the best pair.

    Either test alone is enough: the class test catches a node whose links are all slow, the peer test one bad
    pair on a node whose class has no model (PCIe). Pairs are compared with peers of the same link class only.
    """
    measured: dict[tuple[int, int], float] = {}
    gpus = results.gpus
    for i, a in enumerate(gpus):
        for b in gpus[i + 1 :]:
            rate = results.pair_gbps(a, b)
            if rate is not None:
                measured[(min(a, b), max(a, b))] = rate
    best_by_class: dict[str, float] = {}
    for (a, b), rate in measured.items():
        link = topology.link(a, b)
        cls = link.type.value if link else "UNKNOWN"
        best_by_class[cls] = max(best_by_class.get(cls, 0.0), rate)
    flags: list[Flag] = []
    for (a, b), rate in sorted(measured.items()):
        link = topology.link(a, b)
        cls = link.type.value if link else "UNKNOWN"
        expected = expected_p2p_gbps(link, topology.gpu(a)) if link else None
        best = best_by_class[cls]
        reasons = []
        if expected is not None and rate < class_fraction * expected:
            reasons.append(f"{rate / expected:.0%} of the {cls} expectation {expected:.0f} GB/s")
        if best > 0 and rate < best_fraction * best:
            reasons.append(f"{rate / best:.0%} of the best {cls} pair ({best:.0f} GB/s)")
        if reasons:
            flags.append(
                Flag(
                    FlagKind.LINK_DEGRADED,
                    f"GPU {a}<->{b} {cls} copies at {rate:.0f} GB/s: " + "; ".join(reasons),
                    gpus=(a, b),
                    extra=(
                        ("measured_gbps", round(rate, 2)),
                        ("expected_gbps", expected),
                        ("best_gbps", round(best, 2)),
                    ),
                )
            )
    return flags
