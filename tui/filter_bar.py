"""The ``/`` prompt of the dashboard (what it matches: ``tui.viewmodel.filter``)."""

from __future__ import annotations

from textual import on
from textual.binding import Binding
from textual.message import Message
from textual.widgets import Input


class FilterBar(Input):
    """The ``/`` prompt: filters as you type; Enter keeps the filter, Esc clears it. Hidden until opened."""

    DEFAULT_CSS = """
    FilterBar { display: none; height: 1; border: none; padding: 0 1; background: $panel; }
    FilterBar.-textual-compact { padding: 0 1; }
    FilterBar.open { display: block; }
    """
    BINDINGS = [Binding("escape", "clear", "Clear filter", show=False, id="filter-clear")]

    class FilterChanged(Message):
        """The filter term changed (empty: no filter)."""

        def __init__(self, term: str, done: bool) -> None:
            super().__init__()
            self.term = term
            self.done = done

    def __init__(self, *, id: str | None = None) -> None:
        # compact: see CommandBar; without it the focused prompt is all border and the term typed is never seen.
        super().__init__(
            placeholder="filter GPUs and workers: gpu3, llama, IMB, NUMA, LOST, crashed…", id=id, compact=True
        )

    def open(self) -> None:
        self.add_class("open")
        self.focus()

    @on(Input.Changed)
    def _typed(self, event: Input.Changed) -> None:
        event.stop()
        self.post_message(self.FilterChanged(event.value, done=False))

    @on(Input.Submitted)
    def _kept(self, event: Input.Submitted) -> None:
        event.stop()
        if not event.value.strip():
            self.remove_class("open")
        self.post_message(self.FilterChanged(event.value, done=True))

    def action_clear(self) -> None:
        self.value = ""
        self.remove_class("open")
        self.post_message(self.FilterChanged("", done=True))
