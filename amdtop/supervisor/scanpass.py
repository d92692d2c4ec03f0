"""One status pass's view of the processes: the launches of a state dir found among them (read at most once per
pass), and the recorded processes a pass between full procfs walks starts from."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from amdtop.supervisor import procs
from amdtop.supervisor.state import WorkerRecord


class Found:
    """The launches of one state dir among running processes, read at most once per status pass (one environ read
    per process)."""

    def __init__(self, state_dir: Path) -> None:
        self._state_dir = state_dir
        self._cache: dict[str, procs.FoundLaunch] | None = None
        self.notes: list[str] = []
        """Marked processes that were not taken, and why (a malformed or forged marker)."""

    def __call__(self, table: dict[int, procs.ProcStat]) -> dict[str, procs.FoundLaunch]:
        if self._cache is None:
            self._cache = procs.find_launches(self._state_dir, table, notes=self.notes)
        return self._cache


Checked = tuple[WorkerRecord | None, str | None]
"""A state file as :meth:`StateStore.load_checked` read it: the record, or why there is none."""
MISSING: Checked = (None, "missing")


def roots(checked: Iterable[Checked]) -> set[int]:
    """The recorded processes of every run not marked stopped: where a status pass between full walks looks."""
    roots: set[int] = set()
    for rec, _problem in checked:
        if rec is not None and not rec.stopped:
            roots.add(rec.pid)
            roots.update(pid for pid, _ in rec.known)
    return roots
