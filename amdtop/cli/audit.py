"""``amdtop audit [--json] [--fix ID]``: the tuning checklist for the node and each worker."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from amdtop import runtime
from amdtop.audit import run_audit
from amdtop.audit.context import AuditContext
from amdtop.audit.fix import apply_fix, plan_fix
from amdtop.audit.model import AuditReport
from amdtop.cli.common import node_spec, print_json
from amdtop.cli.served import first_frame, serve_of
from amdtop.errors import InputError
from amdtop.logread.kernel.bus_check import init_failure_lines
from amdtop.model import Topology
from amdtop.pcibus import GpusFailedInit


def register(sub: Any, parent: argparse.ArgumentParser) -> None:
    """Add the ``audit`` command."""
    p = sub.add_parser("audit", parents=[parent], help="the tuning checklist: findings for the node and each worker")
    p.add_argument("--json", action="store_true", help="one JSON document on stdout")
    p.add_argument("--fix", metavar="ID", default=None, help="apply the fix of finding ID (e.g. aiter_off@llama-a)")
    p.add_argument("--yes", action="store_true", help="with --fix: apply without asking")
    p.add_argument("--force", action="store_true", help="with --fix: restart past the launch gate")
    p.set_defaults(func=run_audit_command)


def take_report(args: argparse.Namespace) -> AuditReport:
    """One pipeline tick with the audit (the same report the dashboard and the exporter show); on a node whose GPUs
    all failed to come up, the node's rules alone, the failed GPUs first among the findings."""
    spec = node_spec(args)
    client = serve_of(args)
    if client is not None:  # the serve's audit (it runs every 30 s and after every control action)
        try:
            frame = first_frame(client)
        finally:
            client.close()
        if frame.audit is None:
            raise InputError("audit: the serve ran no audit yet; try again in a moment")
        return frame.audit
    try:
        service = runtime.open(spec, follow_logs=False)
    except GpusFailedInit:
        # No backend opens, so no pipeline: the node rules still read sysfs and /proc (IOMMU, NUMA balancing, the
        # governor), and the bus rule quotes the kernel's lines about the failed init, as the error line would.
        empty = Topology(gpus=(), links=(), numa_nodes=())
        ctx = AuditContext(topology=empty, sys_root=spec.sysfs_root, init_failures=init_failure_lines(spec.kernel_log))
        return run_audit(ctx)
    try:
        frame = service.runtime.tick()
    finally:
        service.shutdown()
    if frame.audit is None:
        raise InputError("audit: the pipeline ran no audit")
    return frame.audit


def render_report(report: AuditReport) -> str:
    """The human list: findings by severity with evidence and fix, then what ran and what could not."""
    out: list[str] = []
    for f in report.findings:
        out.append(f"[{f.severity}] {f.fix_id}: {f.title}")
        out += [f"    {e}" for e in f.evidence]
        out.append(f"    impact: {f.impact}")
        fix = f.fix
        what = {
            "retune": "retune " + " ".join(f"{k}={v}" for k, v in fix.changes),
            "profile_env": "profile env " + " ".join(f"{k}={v}" for k, v in fix.changes),
            "command": f"run as root: {fix.command}",
            "none": fix.advice or "none",
        }[fix.kind]
        out.append(
            f"    fix: {what}{f'  (amdtop audit --fix {f.fix_id})' if fix.kind in ('retune', 'profile_env') else ''}"
        )
        out.append(f"    source: {f.source}")
    counts = report.counts()
    out.append(
        f"{len(report.findings)} finding(s): {counts['error']} error, {counts['warn']} warn, {counts['info']} info; "
        f"{len(report.checked)} rule(s) ran"
    )
    for s in report.skipped:
        out.append(f"  skipped {s.id}{f' ({s.worker})' if s.worker else ''}: {s.why}")
    return "\n".join(out) + "\n"


def run_audit_command(args: argparse.Namespace) -> int:
    """Print the audit, or apply one finding's fix."""
    if args.fix is not None and getattr(args, "readonly", False):
        raise InputError("--readonly: audit --fix is disabled; run amdtop without --readonly to change workers")
    report = take_report(args)
    if args.fix is None:
        if args.json:
            print_json(report.to_json())
        else:
            sys.stdout.write(render_report(report))
        return 0
    finding = report.find(args.fix)
    if finding is None:
        known = ", ".join(f.fix_id for f in report.findings) or "none"
        raise InputError(f"audit --fix: no finding {args.fix!r} now; findings: {known}")
    from amdtop.cli.workers import Workers

    # The serve's supervisor when a serve runs (its retune path, its gate), else this command's own.
    workers = Workers(args) if finding.fix.kind in ("retune", "profile_env") else None
    sup = workers.control if workers is not None else None
    try:
        plan = plan_fix(finding, sup)
        sys.stderr.write(plan.text + "\n")
        if not plan.applies or sup is None:
            return 0
        if not args.yes:
            if not sys.stdin.isatty():
                raise InputError(f"audit --fix {finding.fix_id}: confirm with --yes (no terminal to ask on)")
            sys.stderr.write(f"apply to {plan.worker} and restart it? [y/N] ")
            sys.stderr.flush()
            if sys.stdin.readline().strip().lower() not in ("y", "yes"):
                sys.stderr.write("not applied\n")
                return 1
        apply_fix(plan, sup, force=bool(args.force))
        sys.stderr.write(f"{plan.worker}: applied {finding.fix_id}\n")
    finally:
        if workers is not None:
            workers.close()
    return 0
