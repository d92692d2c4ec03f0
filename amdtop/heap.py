"""The collector's policy for a long-running amdtop process (the dashboard, a viewer, the serve).

Start-up leaves some 85,000 objects tracked by the cyclic collector (modules, classes, Textual's widgets and caches),
all of which live as long as the process, and every full collection walks them all: 45-64 ms on the dev VM. After the
first frame is drawn, :func:`settle` collects start-up's garbage once and freezes what survives, so a full collection
walks only what was made since (2.4 ms on the VM). This bounds a rare pause; it is not a measured saving: on the lent
H200 no full collection landed in any 25-s window of session 14's runs, and the idle dashboard read 0.737 % of a core
frozen against 0.752 % not (``bench/gc_pauses``, docs/benchmarks.md). Frozen objects that later become cyclic garbage
are never reclaimed; start-up's survivors do not (they are the program).
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
