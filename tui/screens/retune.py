"""Retune dialog: ``key=value`` pairs of vllm serve flags for the selected worker's profile."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Static


def parse_changes(text: str) -> dict[str, str]:
    """``max-num-seqs=128 gpu-memory-utilization=0.9`` -> mapping; raises ValueError on a pair without ``=``."""
    changes: dict[str, str] = {}
    for part in text.split():
        key, sep, value = part.partition("=")
        if not sep or not key.strip("-") or not value:
            raise ValueError(f"{part!r} is not KEY=VALUE")
        changes[key.lstrip("-")] = value
    if not changes:
        raise ValueError("nothing to change")
    return changes


class RetuneScreen(ModalScreen[dict[str, str] | None]):
    DEFAULT_CSS = """
    RetuneScreen { align: center middle; }
    RetuneScreen > Vertical { width: 80; max-width: 95%; height: auto; border: thick $accent; padding: 1 2; background: $surface; }
    RetuneScreen #retune-error { color: $error; height: auto; }
    """
    BINDINGS = [Binding("escape", "cancel", "Cancel", id="retune-cancel")]

    def __init__(self, worker: str) -> None:
        super().__init__()
        self.worker = worker

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(
                f"Retune [b]{self.worker}[/b]: vllm serve flags as KEY=VALUE (e.g. max-num-seqs=128, "
                "data-parallel-size=2: dp x tp must equal the GPUs)"
            )
            yield Input(placeholder="max-num-seqs=128", id="retune-input")
            yield Static("", id="retune-error")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        try:
            changes = parse_changes(event.value)
        except ValueError as exc:
            self.query_one("#retune-error", Static).update(str(exc))
            return
        self.dismiss(changes)

    def action_cancel(self) -> None:
        self.dismiss(None)
