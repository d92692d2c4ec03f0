"""What the dashboard opens on a node whose GPUs are on the PCI bus but failed to come up (never the demo there)."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.widgets import Footer, Static

from amdtop.logread.incidents.model import Incident


def failed_text(incident: Incident) -> Text:
    """The screen's body: what failed, the kernel's own lines, the cause and the fix."""
    text = Text()
    text.append("The GPUs failed to come up\n\n", style="bold red")
    text.append(incident.summary + "\n\n", style="bold")
    if incident.evidence:
        text.append("kernel:\n", style="bold")
        for line in incident.evidence:
            text.append(f"  {line}\n", style="yellow")
        text.append("\n")
    text.append("cause: ", style="bold")
    text.append(incident.cause + "\n")
    text.append("fix:   ", style="bold")
    text.append(incident.fix + "\n", style="green")
    bdfs = dict(incident.detail).get("bdfs")
    if isinstance(bdfs, tuple) and bdfs:
        text.append(f"\non the bus without a driver: {', '.join(str(b) for b in bdfs)}\n", style="dim")
    return text


class FailedGpusApp(App[int]):
    """One screen: the GPUs on this node's bus failed driver init; nothing is simulated, nothing is started."""

    CSS = """
    #failed { padding: 1 2; border: heavy $error; height: auto; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [Binding("q", "quit_failed", "Quit")]
    TITLE = "amdtop"

    def __init__(self, incident: Incident) -> None:
        super().__init__()
        self.incident = incident

    def compose(self) -> ComposeResult:
        yield Static(failed_text(self.incident), id="failed")
        yield Footer()

    def action_quit_failed(self) -> None:
        self.exit(1)
