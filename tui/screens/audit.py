"""``u``: the tuning audit of the node and its workers: findings with evidence and fix; ``f`` applies the highlighted
finding's fix through the retune path (diff, confirmation, restart); root commands are shown, never run."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer, OptionList, Static
from textual.widgets.option_list import Option

from amdtop.audit.model import AuditReport, Finding

if TYPE_CHECKING:
    from tui.controller import Controller

SEVERITY_STYLE = {"error": "bold red", "warn": "yellow", "info": "cyan"}


def finding_label(f: Finding) -> Text:
    """One row of the list: severity, the worker or GPUs, the title."""
    where = f.worker or (f"GPU {','.join(map(str, f.gpus))}" if f.gpus else "node")
    return Text.assemble((f"{f.severity:<5} ", SEVERITY_STYLE.get(f.severity, "")), (f"{where:<14} ", "bold"), f.title)


def finding_detail(f: Finding) -> Text:
    """The evidence, impact, fix and source of one finding."""
    out = Text()
    out.append(f"{f.fix_id}", style="bold")
    out.append(f"  ({f.scope}; set by {f.set_by or '-'})\n")
    for line in f.evidence:
        out.append(f"  {line}\n", style="dim")
    out.append(f"impact: {f.impact}\n")
    fix = f.fix
    if fix.kind in ("retune", "profile_env"):
        out.append("fix (f): " + " ".join(f"{k}={v}" for k, v in fix.changes) + "\n", style="green")
    elif fix.kind == "command":
        out.append(f"run as root (amdtop never runs it): {fix.command}\n", style="yellow")
    else:
        out.append(f"advice: {fix.advice or 'none'}\n")
    out.append(f"source: {f.source}", style="dim")
    return out


def summary(report: AuditReport | None) -> str:
    """The line above the list."""
    if report is None:
        return "no audit yet (it runs on the slow cadence)"
    c = report.counts()
    return (
        f"{len(report.findings)} findings: {c['error']} error, {c['warn']} warn, {c['info']} info · "
        f"{len(report.checked)} rules ran · {len(report.skipped)} skipped"
    )


class AuditScreen(Screen[None]):
    DEFAULT_CSS = """
    AuditScreen #audit-summary { height: 1; padding: 0 1; background: $boost; }
    AuditScreen OptionList { height: 1fr; min-height: 5; }
    AuditScreen #audit-detail-box { height: 2fr; border-top: solid $primary; }
    AuditScreen #audit-detail { padding: 0 1; }
    AuditScreen #audit-skipped { padding: 0 1; color: $text-muted; }
    """
    BINDINGS = [
        Binding("escape,u,q", "close", "Close", id="audit-close"),
        Binding("f", "fix", "Apply fix", id="audit-fix", tooltip="retune/profile env fix of the highlighted finding"),
    ]

    def __init__(self, report: AuditReport | None, controller: Controller) -> None:
        super().__init__()
        self.report = report
        self.controller = controller
        self.readonly = controller.readonly

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(summary(self.report), id="audit-summary", markup=False)
            yield OptionList(id="audit-list")
            with VerticalScroll(id="audit-detail-box"):
                yield Static("", id="audit-detail")
                yield Static("", id="audit-skipped", markup=False)
        yield Footer()

    def on_mount(self) -> None:
        self.show(self.report)
        self.set_interval(2.0, self._newer)

    def show(self, report: AuditReport | None) -> None:
        """Fill the list and the skipped lines from ``report``."""
        self.report = report
        self.query_one("#audit-summary", Static).update(summary(report))
        options = self.query_one(OptionList)
        options.clear_options()
        findings = report.findings if report else ()
        options.add_options([Option(finding_label(f), id=f.fix_id) for f in findings])
        skipped = report.skipped if report else ()
        self.query_one("#audit-skipped", Static).update(
            "\n".join(["skipped:"] + [f"  {s.id}{f' ({s.worker})' if s.worker else ''}: {s.why}" for s in skipped])
            if skipped
            else ""
        )
        if findings:
            options.highlighted = 0
            self.query_one("#audit-detail", Static).update(finding_detail(findings[0]))
        else:
            self.query_one("#audit-detail", Static).update(Text("no findings: every rule that ran passed"))

    def _newer(self) -> None:
        frame = self.controller.newest_frame()
        if frame is not None and frame.audit is not None and frame.audit is not self.report:
            self.show(frame.audit)

    def selected(self) -> Finding | None:
        """The highlighted finding."""
        options = self.query_one(OptionList)
        if self.report is None or options.highlighted is None or options.highlighted >= len(self.report.findings):
            return None
        return self.report.findings[options.highlighted]

    def on_option_list_option_highlighted(self, event: OptionList.OptionHighlighted) -> None:
        f = self.selected()
        if f is not None:
            self.query_one("#audit-detail", Static).update(finding_detail(f))

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "fix":
            if self.readonly:
                return False
            f = self.selected()
            return None if f is None or f.fix.kind not in ("retune", "profile_env") or not f.worker else True
        return True

    def action_close(self) -> None:
        self.dismiss(None)

    def action_fix(self) -> None:
        f = self.selected()
        if f is None or f.worker is None or self.readonly:
            return
        self.controller.audit_fix(f)
