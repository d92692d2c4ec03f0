"""The launch dialog's gate: the reasons the launch gate refused a launch or restart, one line each, with the choice
to start anyway (``--force``; the supervisor records what was forced). ``tui.controller.Controller.offer_force``
shows it."""

from __future__ import annotations

from amdtop.audit.gate import GateRefused


def gate_text(verb: str, name: str, exc: GateRefused) -> str:
    """The dialog's text: one line per reason."""
    reasons = "\n".join(f"• {f.title}" for f in exc.findings)
    return (
        f"{verb.capitalize()} {name} refused by the launch gate:\n\n{reasons}\n\n{verb.capitalize()} anyway (--force)?"
    )
