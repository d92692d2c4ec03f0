"""The collector's policy for a long-running amdtop process (the dashboard, a viewer, the serve).

Start-up leaves some 85,000 objects tracked by the cyclic collector (modules, classes, Textual's widgets and caches),
all of which live as long as the process, and every full collection walks them all: 45-64 ms on the dev VM. After the
first frame is drawn, :func:`settle` collects start-up's garbage once and freezes what survives, so a full collection
walks only what was made since (2.4 ms on the VM). That bounds a rare pause.

It also raises the youngest generation's threshold (:data:`GEN0_THRESHOLD`). A tick allocates a few thousand
containers (a frame's dataclasses and tuples, Textual's strips and segments), nearly all freed by their reference
counts within the tick, so CPython's default of 700 ran a young collection every 1.6 s and an older one every 20 s
in the idle in-process dashboard, 150 us of CPU a second on the dev VM (51 us with this threshold), and more of them
in a viewer and its serve together (each process counts its own allocations, and a frame is built twice: by the
serve's pipeline, then by the viewer's decode). Measured in docs/benchmarks.md ("The collector's threshold and
where the pair's extra goes"). Cyclic garbage waits longer for its collection: at most ``GEN0_THRESHOLD`` net
allocations, a few MiB.
"""

from __future__ import annotations

import gc

__all__ = ["GEN0_THRESHOLD", "settle"]

GEN0_THRESHOLD = 20_000
"""Net container allocations between young collections (CPython's default: 700); the older generations keep their
default multipliers (10, 10)."""

_settled = False


def settle() -> bool:
    """Collect, move every tracked object to the permanent generation and raise the young threshold; once per
    process. True when it did."""
    global _settled
    if _settled:
        return False
    _settled = True
    gc.collect()
    gc.freeze()
    _gen0, gen1, gen2 = gc.get_threshold()
    gc.set_threshold(GEN0_THRESHOLD, gen1, gen2)
    return True
