"""The audit inside the node pipeline: run on the slow cadence (``AUDIT_EVERY_S``), the report rides in every frame
until the next run. The start-up log cache lives here, so each run reads only what the logs appended."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from amdtop.audit.context import AuditContext, ProcCache, target_of
from amdtop.audit.model import AuditReport
from amdtop.audit.registry import run_audit
from amdtop.audit.startup_log import StartupLogs
from amdtop.model import Flag, NodeSnapshot, WorkerStatus
from amdtop.procinfo import PROC
from amdtop.thresholds import AUDIT_EVERY_S

if TYPE_CHECKING:
    from amdtop.supervisor.profiles import Profile

ProfileLookup = Callable[[str], "Profile | None"]


def profile_lookup(source: object) -> ProfileLookup:
    """Profiles by name from a supervisor (anything with ``profile(name)``); nothing for other sources."""
    find = getattr(source, "profile", None)
    if find is None:
        return lambda _name: None

    def lookup(name: str) -> Profile | None:
        try:
            found = find(name)
        except Exception:  # unknown name: a discovered server
            return None
        return found if found is not None and hasattr(found, "env") else None

    return lookup


@dataclass
class Auditor:
    """Runs the audit at most every ``every_s`` (at once after :meth:`request`)."""

    sys_root: Path = Path("/sys")
    proc_root: Path = PROC
    profiles: ProfileLookup = field(default=lambda _name: None)
    every_s: float = AUDIT_EVERY_S
    clock: Callable[[], float] = time.monotonic
    _logs: StartupLogs = field(default_factory=StartupLogs)
    _procs: ProcCache = field(init=False)
    _at: float | None = None
    _report: AuditReport | None = None
    _due: bool = True

    def __post_init__(self) -> None:
        """Process reads age on the auditor's own clock."""
        self._procs = ProcCache(clock=self.clock)

    def request(self) -> None:
        """Run at the next tick (a control action changed the workers)."""
        self._due = True

    def run(self, snap: NodeSnapshot | None, workers: Sequence[WorkerStatus], flags: Sequence[Flag]) -> AuditReport:
        """Audit now."""
        topology = snap.topology if snap is not None else None
        if topology is None:
            from amdtop.model import Topology

            topology = Topology((), (), ())
        ctx = AuditContext(
            topology=topology,
            snapshot=snap,
            targets=[target_of(w, self.profiles(w.name)) for w in workers],
            sys_root=self.sys_root,
            proc_root=self.proc_root,
            flags=flags,
            startup_logs=self._logs,
            carry=self._procs,
        )
        self._report = run_audit(ctx)
        return self._report

    def maybe_run(
        self, snap: NodeSnapshot, workers: Sequence[WorkerStatus], flags: Sequence[Flag]
    ) -> AuditReport | None:
        """The newest report, re-run when due."""
        now = self.clock()
        if self._due or self._at is None or now - self._at >= self.every_s:
            self._due = False
            self._at = now
            return self.run(snap, workers, flags)
        return self._report
