"""``/`` filter on the dashboard: GPU and worker rows that mention a GPU, a worker or a flag."""

from __future__ import annotations

import re
from collections.abc import Mapping

from textual import on
from textual.binding import Binding
from textual.message import Message
from textual.widgets import Input

_GPU = re.compile(r"^(?:gpu)?(\d+)$", re.IGNORECASE)


def row_text(cells: tuple[object, ...]) -> str:
    return " ".join(str(c) for c in cells).lower()


def matches(key: str, cells: tuple[object, ...], term: str, extra: str = "") -> bool:
    """True when every word of ``term`` is in the row (``gpu3``/``3`` names GPU 3's row and the rows using GPU 3).

    ``extra`` is text the row stands for without showing it (a worker's flags).
    """
    text = f"{row_text(cells)} {extra.lower()}"
    for word in term.lower().split():
        gpu = _GPU.match(word)
        if gpu is not None:
            index = gpu.group(1)
            if key == f"gpu-{index}":
                continue
            if key.startswith("w-") and index in re.split(r"[ ,]+", str(cells[2]) if len(cells) > 2 else ""):
                continue
            return False
        if word not in text:
            return False
    return True


def filter_rows(
    rows: Mapping[str, tuple[object, ...]], term: str, extra: Mapping[str, str] | None = None
) -> dict[str, tuple[object, ...]]:
    if not term.strip():
        return dict(rows)
    extra = extra or {}
    return {k: cells for k, cells in rows.items() if matches(k, cells, term, extra.get(k, ""))}


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
