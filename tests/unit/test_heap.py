"""amdtop/heap.py: start-up's objects frozen out of the collector's reach, once per process.

Run in a child interpreter: freezing this test process would keep every later test's start-up objects alive.
"""

from __future__ import annotations

import subprocess
import sys

CHILD = """
import gc, weakref
from amdtop import heap
class Node: pass
junk = Node()
junk.me = junk  # a cycle that only the collector frees
gone = weakref.ref(junk)
del junk
before = gc.get_freeze_count()
first, second = heap.settle(), heap.settle()
print(before, first, second, gc.get_freeze_count() > 1000, gone() is None, gc.get_threshold()[0] == heap.GEN0_THRESHOLD)
"""


def test_settle_collects_then_freezes_once() -> None:
    out = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, check=True, timeout=60)
    before, first, second, frozen, collected, raised = out.stdout.split()
    assert before == "0"
    assert (first, second) == ("True", "False")  # the second call is a no-op
    assert frozen == "True"  # the interpreter's modules and their objects sit in the permanent generation
    assert collected == "True"  # start-up's cycle was collected before the freeze, not frozen with the rest
    assert raised == "True"  # the young generation's threshold: a tick's short-lived containers no longer trigger it
