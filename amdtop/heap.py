"""The collector's policy for a long-running amdtop process (the dashboard, a viewer, the serve).

Start-up leaves some 85,000 objects tracked by the cyclic collector (modules, classes, Textual's widgets and caches),
all of which live as long as the process. Every full collection walks them all: 45 ms on this VM, over 100 ms on the
lent H200's host, landing every few tens of seconds at steady state; in a 20-s window one such pass is 0.2-0.5 % of a
core, as much as a second's drawing (the idle in-process dashboard's figure that moved between runs). After the first
frame is drawn, :func:`settle` collects start-up's garbage once and freezes what survives: full collections then walk
only what was made since (2 ms). Frozen objects that later become cyclic garbage are never reclaimed; start-up's
survivors do not (they are the program).
"""

from __future__ import annotations

import gc

__all__ = ["settle"]

_settled = False


def settle() -> bool:
    """Collect, then move every tracked object to the permanent generation; once per process. True when it did."""
    global _settled
    if _settled:
        return False
    _settled = True
    gc.collect()
    gc.freeze()
    return True
