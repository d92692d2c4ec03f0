"""Frame -> the status bar: host, backend, counts, flags, incidents, the audit's badge, errors, and the clock apart
(it has its own cells: a tick repaints those, not the whole bar). Pure: no Textual."""

from __future__ import annotations

import time

from rich.markup import escape

from amdtop.audit.model import AuditReport
from amdtop.pipeline import NodeFrame


def status_line(
    frame: NodeFrame, *, now: float, interval: float, readonly: bool, paused: bool, poll_error: str | None
) -> str:
    """The whole bar as one markup line, ending in `` · HH:MM:SSZ`` (``now``, UTC)."""
    snap = frame.snapshot
    lost = sum(1 for s in snap.gpus if s.lost)
    flags = frame.flags
    when = time.strftime("%H:%M:%S", time.gmtime(now))
    parts = [
        f"[b]amdtop[/b] {snap.hostname}",
        f"backend {snap.backend}",
        f"{len(snap.topology.gpus)} GPUs" + (f" ([red]{lost} lost[/red])" if lost else ""),
        f"{len(frame.workers)} workers",
        f"every {interval:g}s",
        f"[red]{len(flags)} flags[/red]" if flags else "[green]no flags[/green]",
    ]
    live = [i for i in frame.incidents if not i.historic]
    if live:
        parts.append(f"[red]{len(live)} incident{'s' if len(live) != 1 else ''}[/red]")
    missing = () if frame.kernel_log is None else frame.kernel_log.missing_gpus
    if missing:
        # GPUs on the bus that never came up: the one fact the operator must see first, by address
        named = ", ".join(m.bdf for m in missing[:4]) + (" ..." if len(missing) > 4 else "")
        parts.append(f"[red]{len(missing)} GPU{'s' if len(missing) != 1 else ''} missing: {escape(named)}[/red]")
    else:
        for bus in (i for i in live if i.kind == "gpu_init_failed"):
            parts.append(f"[red]{escape(bus.summary.split(' (')[0])}[/red]")
    if frame.audit is not None:
        parts.append(audit_badge(frame.audit))
    if readonly:
        parts.append("[yellow]read-only[/yellow]")
    if paused:
        parts.append("[yellow]PAUSED[/yellow]")
    for error in (*frame.errors, *((poll_error,) if poll_error else ())):
        parts.append(f"[red]{escape(error)}[/red]")
    return " · ".join(parts) + f" · {when}Z"


def audit_badge(report: AuditReport) -> str:
    """The header's count of audit findings (``u`` opens them)."""
    c = report.counts()
    if not report.findings:
        return "[green]audit ok[/green]"
    color = "red" if c["error"] else "yellow" if c["warn"] else "cyan"
    return f"[{color}]audit {len(report.findings)}[/{color}]"


def split_clock(status: str) -> tuple[str, str]:
    """``"... · 10:32:25Z"`` -> (the rest, ``"10:32:25Z"``); a line without a trailing clock stays whole."""
    head, sep, tail = status.rpartition(" · ")
    if sep and tail.endswith("Z") and len(tail) <= 12:
        return head, tail
    return status, ""
