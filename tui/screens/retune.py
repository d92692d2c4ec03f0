"""Retune dialog: ``key=value`` pairs of vllm serve flags for the selected worker's profile."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Static

from amdtop.errors import InputError
from amdtop.supervisor.retune import changed_words, parse_changes


class RetuneScreen(ModalScreen[dict[str, str] | None]):
    DEFAULT_CSS = """
    RetuneScreen { align: center middle; }
    RetuneScreen > Vertical { width: 80; max-width: 95%; height: auto; border: thick $accent; padding: 1 2; background: $surface; }
    RetuneScreen #retune-error { color: $error; height: auto; }
    """
    BINDINGS = [Binding("escape", "cancel", "Cancel", id="retune-cancel")]

    def __init__(self, worker: str, current: tuple[str, ...] = ()) -> None:
        """``current``: the worker's retunable flags and env as KEY=VALUE words (secrets masked), the input's start."""
        super().__init__()
        self.worker = worker
        self.current = current

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(
                f"Retune [b]{self.worker}[/b]: vllm serve flags as KEY=VALUE (e.g. max-num-seqs=128, "
                "data-parallel-size=2: dp x tp must equal the GPUs)"
            )
            yield Input(" ".join(self.current), placeholder="max-num-seqs=128", id="retune-input")
            yield Static("", id="retune-error")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        try:
            changes = changed_words(self.current, parse_changes(event.value.split()))
        except InputError as exc:
            self.query_one("#retune-error", Static).update(str(exc))
            return
        if not changes:
            self.query_one("#retune-error", Static).update("nothing changed; edit a value, e.g. max-num-seqs=64")
            return
        self.dismiss(changes)

    def action_cancel(self) -> None:
        self.dismiss(None)
