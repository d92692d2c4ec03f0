"""The gate before launch and restart: the audit's gate rules on the GPUs a worker is about to use.

The supervisor calls :func:`enforce` from one place before it starts a worker; a refusal is one line per reason and
``--force`` overrides it (the overridden reasons are kept in the worker's state record).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from amdtop.audit.context import AuditContext, AuditTarget
from amdtop.audit.model import Finding
from amdtop.audit.registry import all_rules, run_rules
from amdtop.errors import AmdtopError
from amdtop.model import NodeSnapshot, Topology
from amdtop.procinfo import PROC

if TYPE_CHECKING:
    from amdtop.supervisor.profiles import Profile


class GateRefused(AmdtopError):
    """The launch gate refused: the GPUs are not fit to start on (exit status 1, one line per reason)."""

    def __init__(self, name: str, action: str, findings: list[Finding]) -> None:
        """Keep the findings for the TUI's launch dialog."""
        self.findings = findings
        lines = "\n".join(f"  {f.title}" for f in findings)
        super().__init__(f"worker[{name}]: {action} refused ({len(findings)} reason(s); --force overrides):\n{lines}")


@dataclass
class LaunchGate:
    """What the gate reads: the topology, a fresh sample of the node (``None`` on a host without GPU telemetry),
    sysfs and procfs."""

    topology: Topology
    sample: Callable[[], NodeSnapshot | None]
    sys_root: Path = Path("/sys")
    proc_root: Path = PROC

    def check(self, profile: Profile, own_pids: Iterable[int] = ()) -> list[Finding]:
        """The gate's findings for starting ``profile`` (its own live processes, ``own_pids``, never count)."""
        if not profile.gpus:
            return []
        own = tuple(p for p in own_pids if p)
        target = AuditTarget(name=profile.name, gpus=tuple(profile.gpus), port=profile.port, pids=own, profile=profile)
        ctx = AuditContext(
            topology=self.topology,
            snapshot=self.sample(),
            targets=[target],
            sys_root=self.sys_root,
            proc_root=self.proc_root,
            launching=True,
        )
        findings, _checked, _skipped = run_rules(ctx, [r for r in all_rules() if r.gate])
        return findings

    def enforce(self, profile: Profile, own_pids: Iterable[int], force: bool, action: str) -> tuple[str, ...]:
        """:func:`enforce` as the supervisor calls it: through the gate it holds (the supervisor sits below the
        audit and imports none of it)."""
        return enforce(self, profile, own_pids, force, action)


def enforce(gate: LaunchGate, profile: Profile, own_pids: Iterable[int], force: bool, action: str) -> tuple[str, ...]:
    """Run the gate for ``profile``: GateRefused unless ``force``; returns the reasons forced past (to record)."""
    findings = gate.check(profile, own_pids)
    if findings and not force:
        raise GateRefused(profile.name, action, findings)
    return tuple(f.title for f in findings)
