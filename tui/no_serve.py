"""What a browser tab shows when no ``amdtop serve`` runs for its state dir: the reason, in the tab.

Each tab of ``amdtop web`` is a viewer process whose stdout is the page and whose stderr reaches only the web
server's terminal: an error written there leaves the tab blank. This app says it on the screen instead and waits
for the tab to close (or ``q``).
"""

from __future__ import annotations

from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.widgets import Static


class NoServeApp(App[int]):
    """One line of reason and what to do, on an otherwise empty screen."""

    TITLE = "amdtop"
    CSS = "Static { margin: 1 2; }"
    BINDINGS = [Binding("q", "quit_app", "quit")]

    def __init__(self, message: str) -> None:
        super().__init__()
        self.message = message

    def compose(self) -> ComposeResult:
        yield Static(f"amdtop: error: {self.message}\n\nStart it, then reload this page. (q closes)", markup=False)

    def action_quit_app(self) -> None:
        self.exit(1)
