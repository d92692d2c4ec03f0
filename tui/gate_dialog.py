"""The launch dialog's gate: the reasons the launch gate refused a launch or restart, one line each, with the choice
to start anyway (``--force``; the supervisor records what was forced)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from amdtop.audit.gate import GateRefused
from tui.screens.confirm import ConfirmScreen

if TYPE_CHECKING:
    from tui.app import AmdtopApp


def gate_text(verb: str, name: str, exc: GateRefused) -> str:
    """The dialog's text: one line per reason."""
    reasons = "\n".join(f"• {f.title}" for f in exc.findings)
    return (
        f"{verb.capitalize()} {name} refused by the launch gate:\n\n{reasons}\n\n{verb.capitalize()} anyway (--force)?"
    )


def offer_force(app: AmdtopApp, verb: str, name: str, exc: GateRefused) -> None:
    """Show the reasons; on yes, run the same action with ``force`` (UI thread)."""
    control = app.service
    app.dashboard.set_worker_error(name, str(exc).splitlines()[0])

    def done(ok: bool | None) -> None:
        if not ok:
            return
        if verb == "restart":
            app._call(verb, name, lambda: control.restart(name, force=True))
        else:
            app._call(verb, name, lambda: control.launch(name, force=True))

    app.push_screen(ConfirmScreen(gate_text(verb, name, exc), yes=f"{verb.capitalize()} anyway"), done)
