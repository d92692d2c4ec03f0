"""What an audit says: findings (with their evidence and fix), the rules that ran, and the rules that could not."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

SEVERITIES = ("error", "warn", "info")
FIX_KINDS = ("retune", "profile_env", "command", "none")


class RuleSkipped(Exception):
    """Raised by a rule that cannot read its input: the audit lists it in ``skipped`` with this reason."""


@dataclass(frozen=True, slots=True)
class Fix:
    """How to remove a finding.

    ``retune`` and ``profile_env`` carry retune changes (``numa_node=auto``, ``env.NAME=VALUE``; an empty value
    removes a variable) applied through the supervisor's retune path; ``command`` is text the operator runs (as root:
    amdtop never runs it); ``none`` carries only advice (e.g. the vLLM version that lifts the limit).
    """

    kind: str
    changes: tuple[tuple[str, str], ...] = ()
    command: str | None = None
    advice: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The contract's ``fix`` object."""
        doc: dict[str, Any] = {"kind": self.kind}
        if self.changes:
            doc["changes"] = dict(self.changes)
        if self.command is not None:
            doc["command"] = self.command
            doc["root"] = self.command.startswith("sudo ")
        if self.advice is not None:
            doc["advice"] = self.advice
        return doc


NO_FIX = Fix("none")


@dataclass(frozen=True, slots=True)
class Finding:
    """One thing a rule found wrong, with what it read and why it costs throughput."""

    id: str
    severity: str
    scope: str
    title: str
    evidence: tuple[str, ...]
    impact: str
    source: str
    fix: Fix = NO_FIX
    worker: str | None = None
    gpus: tuple[int, ...] = ()
    set_by: str | None = None
    """Who set what was found: ``profile``, ``environment``, ``vllm`` (vLLM itself for this version and GPU),
    ``node`` or ``None`` where it does not apply."""

    @property
    def fix_id(self) -> str:
        """The id ``amdtop audit --fix`` takes: the rule id, ``@worker`` for a worker's finding."""
        return f"{self.id}@{self.worker}" if self.worker else self.id

    def to_json(self) -> dict[str, Any]:
        """The contract's finding object."""
        return {
            "id": self.id,
            "fix_id": self.fix_id,
            "severity": self.severity,
            "scope": self.scope,
            "worker": self.worker,
            "gpus": list(self.gpus),
            "title": self.title,
            "evidence": list(self.evidence),
            "impact": self.impact,
            "fix": self.fix.to_json(),
            "source": self.source,
            "set_by": self.set_by,
        }


@dataclass(frozen=True, slots=True)
class Skipped:
    """A rule (for one worker, or for the whole node) that could not run, and why."""

    id: str
    why: str
    worker: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The contract's ``skipped`` entry."""
        doc: dict[str, Any] = {"id": self.id, "why": self.why}
        if self.worker is not None:
            doc["worker"] = self.worker
        return doc


@dataclass(frozen=True, slots=True)
class AuditReport:
    """One audit of the node."""

    findings: tuple[Finding, ...] = ()
    checked: tuple[str, ...] = ()
    """Every rule that ran (at least for one worker): a missing finding means it passed."""
    skipped: tuple[Skipped, ...] = ()
    timestamp: float | None = None
    """When the audit ran, seconds since the epoch."""
    duration_s: float | None = None
    """How long it took."""
    locality: tuple[tuple[str, float | None], ...] = field(default=())
    """(worker, share of its resident pages on its GPUs' NUMA node, percent) measured from ``numa_maps``."""

    def counts(self) -> dict[str, int]:
        """Findings per severity."""
        out = dict.fromkeys(SEVERITIES, 0)
        for f in self.findings:
            out[f.severity] = out.get(f.severity, 0) + 1
        return out

    def find(self, fix_id: str) -> Finding | None:
        """The finding with ``fix_id`` (or a plain rule id when only one finding has it)."""
        exact = [f for f in self.findings if f.fix_id == fix_id]
        if exact:
            return exact[0]
        by_id = [f for f in self.findings if f.id == fix_id]
        return by_id[0] if len(by_id) == 1 else None

    def locality_of(self, worker: str) -> float | None:
        """Measured NUMA locality of ``worker`` (percent), ``None`` when unknown."""
        return next((pct for name, pct in self.locality if name == worker), None)

    def to_json(self) -> dict[str, Any]:
        """The contract's ``audit`` document."""
        return {
            "findings": [f.to_json() for f in self.findings],
            "checked": list(self.checked),
            "skipped": [s.to_json() for s in self.skipped],
            "counts": self.counts(),
            "timestamp": self.timestamp,
        }
