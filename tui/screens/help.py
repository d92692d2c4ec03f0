"""``?``: every key of the dashboard with what it does."""

from __future__ import annotations

from rich.table import Table
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

KEY_NAMES = {"colon": ":", "slash": "/", "question_mark": "?"}


class HelpScreen(ModalScreen[None]):
    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen > VerticalScroll { width: 78; max-width: 95%; height: auto; max-height: 90%; border: thick $primary; padding: 0 1; background: $surface; }
    """
    BINDINGS = [Binding("escape,q,question_mark", "close", "Close", id="help-close")]

    def __init__(self, keys: list[tuple[str, str, bool]]) -> None:
        super().__init__()
        self.keys = keys

    def compose(self) -> ComposeResult:
        table = Table(box=None, title="amdtop keys", show_header=True, header_style="bold")
        table.add_column("Key", style="bold cyan", no_wrap=True)
        table.add_column("Action")
        for key, desc, enabled in self.keys:
            table.add_row(KEY_NAMES.get(key, key), desc if enabled else f"[dim]{desc} (disabled)[/dim]")
        table.add_row(": … Tab", "in command mode: complete the command, worker or retune key; Enter runs, Esc closes")
        table.add_row("/ … Enter", "keep the filter (GPU, worker and process rows); Esc clears it")
        table.add_row("ctrl+p", "command palette")
        table.add_row("tab / shift+tab", "move focus between panes")
        table.add_row("e t w / p c", "inside the log pane: errors, transport, worker, search, pause, clear")
        table.add_row("o O k", "inside the Processes pane: next sort column, reverse, TERM (then KILL) with confirmation")
        with VerticalScroll():
            yield Static(table)
            yield Static("[dim]Esc or ? closes this help.[/dim]")

    def action_close(self) -> None:
        self.dismiss(None)
