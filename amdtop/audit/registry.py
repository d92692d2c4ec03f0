"""The rule registry and the one function that runs rules: ``amdtop audit``, the dashboard and the gate call it."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from amdtop.audit.context import AuditContext
from amdtop.audit.model import AuditReport, Finding, RuleSkipped, Skipped

Outcome = Finding | Skipped
"""What a rule yields: a finding, or a worker it could not judge (with why)."""
Check = Callable[[AuditContext], Iterable[Outcome]]


@dataclass(frozen=True, slots=True)
class Rule:
    """One check: ``id`` (also every finding's id), its scope, and whether the launch gate runs it."""

    id: str
    scope: str
    check: Check
    gate: bool = False


RULES: list[Rule] = []


def rule(rule_id: str, scope: str, *, gate: bool = False) -> Callable[[Check], Check]:
    """Register ``check`` under ``rule_id`` (rule modules register on import; :func:`all_rules` imports them)."""

    def add(check: Check) -> Check:
        RULES.append(Rule(rule_id, scope, check, gate))
        return check

    return add


def all_rules() -> tuple[Rule, ...]:
    """Every registered rule, in registration order."""
    # Imported for their registrations; kept here so that importing the registry alone stays cheap.
    from amdtop.audit import rules_env, rules_gate, rules_node, rules_numa, rules_sglang, rules_vllm  # noqa: F401

    return tuple(RULES)


def run_rules(ctx: AuditContext, rules: Sequence[Rule]) -> tuple[list[Finding], list[str], list[Skipped]]:
    """Run ``rules`` on ``ctx``: (findings, ids of rules that ran, skips). A rule that fails never stops the rest."""
    findings: list[Finding] = []
    checked: list[str] = []
    skipped: list[Skipped] = []
    for r in rules:
        ran = True
        mine: list[Skipped] = []
        try:
            for out in r.check(ctx):
                if isinstance(out, Skipped):
                    mine.append(out)
                else:
                    findings.append(out)
        except RuleSkipped as why:
            ran = False
            mine.append(Skipped(r.id, str(why)))
        except Exception as exc:  # a rule's bug must not hide the other rules' findings: it is reported as a skip
            ran = False
            mine.append(Skipped(r.id, f"rule failed: {type(exc).__name__}: {exc}"))
        # A rule that skipped every worker it looked at did not run.
        if ran and mine and all(s.worker is not None for s in mine):
            judged = {t.name for t in ctx.targets} - {s.worker for s in mine}
            ran = bool(judged) or r.scope != "worker"
        if ran:
            checked.append(r.id)
        skipped += mine
    return findings, checked, skipped


def run_audit(
    ctx: AuditContext, *, rules: Sequence[Rule] | None = None, clock: Callable[[], float] = time.time
) -> AuditReport:
    """Run every rule (or ``rules``) on ``ctx`` and build the report."""
    from amdtop.audit.rules_numa import localities

    start = time.perf_counter()
    findings, checked, skipped = run_rules(ctx, all_rules() if rules is None else rules)
    order = {"error": 0, "warn": 1, "info": 2}
    findings.sort(key=lambda f: (order.get(f.severity, 3), f.worker or "", f.id))
    return AuditReport(
        findings=tuple(findings),
        checked=tuple(checked),
        skipped=tuple(skipped),
        timestamp=clock(),
        duration_s=time.perf_counter() - start,
        locality=tuple(localities(ctx)),
    )
