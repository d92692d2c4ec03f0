"""Applying a finding's fix: retune and profile env changes go through the supervisor's retune path (diff first,
confirmation, then the restart); root commands are shown, never run."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from amdtop.audit.model import Finding
from amdtop.errors import InputError


class Retuner(Protocol):
    """The retune path a fix goes through: a supervisor of this process, or the node service of a running serve."""

    def retune_diff(self, name: str, changes: Mapping[str, str]) -> str: ...

    def retune(self, name: str, changes: Mapping[str, str], grace: float | None = None, force: bool = False) -> Any: ...


@dataclass(frozen=True, slots=True)
class FixPlan:
    """What applying a finding's fix would do."""

    finding: Finding
    worker: str | None
    changes: dict[str, str]
    """Retune changes (empty for ``command``/``none``)."""
    text: str
    """The diff, the command to run as root, or the advice, for the operator to read before confirming."""

    @property
    def applies(self) -> bool:
        """True when amdtop can apply it (a retune of one of its workers)."""
        return bool(self.changes) and self.worker is not None


def plan_fix(finding: Finding, sup: Retuner | None) -> FixPlan:
    """The plan for ``finding``'s fix; the diff comes from the retune path itself (which validates the changes)."""
    fix = finding.fix
    if fix.kind in ("retune", "profile_env"):
        if finding.worker is None or sup is None:
            raise InputError(f"audit --fix {finding.fix_id}: no worker profile to change")
        changes = dict(fix.changes)
        return FixPlan(finding, finding.worker, changes, sup.retune_diff(finding.worker, changes))
    if fix.kind == "command":
        return FixPlan(finding, finding.worker, {}, f"run as root (amdtop never runs it):\n  {fix.command}")
    return FixPlan(finding, finding.worker, {}, f"no change amdtop can make: {fix.advice or 'nothing to do'}")


def apply_fix(plan: FixPlan, sup: Retuner, *, force: bool = False) -> None:
    """Apply ``plan`` through the retune path (refused under ``--readonly`` by the supervisor itself)."""
    if not plan.applies or plan.worker is None:
        raise InputError(f"audit --fix {plan.finding.fix_id}: {plan.finding.fix.kind} fixes are not applied by amdtop")
    sup.retune(plan.worker, plan.changes, force=force)
