"""Every process on the GPUs: one row per process per GPU (or partition), a total row per GPU."""

from __future__ import annotations

from typing import ClassVar

from textual.binding import Binding, BindingType
from textual.message import Message

from widgets.row_table import RowTable

SORTS = (
    ("mem", "GPU mem"),
    ("gpu_util", "GPU%"),
    ("cpu", "CPU%"),
    ("rss", "RSS"),
    ("elapsed", "Elapsed"),
    ("pid", "PID"),
    ("user", "User"),
    ("owner", "Owner"),
    ("command", "Command"),
)
"""Sort keys in the order ``o`` cycles through them."""


class ProcessesTable(RowTable):
    COLUMNS = (
        ("gpu", "GPU"),
        ("pid", "PID"),
        ("user", "User"),
        ("owner", "Owner"),
        ("mem", "GPU mem"),
        ("gpu_util", "GPU%"),
        ("cpu", "CPU%"),
        ("rss", "RSS"),
        ("elapsed", "Elapsed"),
        ("command", "Command"),  # last: long, the first to scroll off
    )
    BINDINGS: ClassVar[list[BindingType]] = [
        *RowTable.BINDINGS,
        Binding("o", "sort_next", "Sort", id="procs-sort", tooltip="sort processes by the next column"),
        Binding("O", "sort_reverse", "Reverse", id="procs-reverse", tooltip="reverse the sort order"),
        Binding("t", "tree", "By worker", id="procs-tree", tooltip="group the processes by worker, or by GPU"),
        Binding(
            "k", "signal", "TERM/KILL", id="procs-signal", tooltip="send TERM (then KILL) to the process (confirm)"
        ),
    ]

    class SortChanged(Message):
        """The user picked another sort key or order."""

    class SignalRequested(Message):
        """The user asked to signal the process on row ``key``."""

        def __init__(self, key: str) -> None:
            super().__init__()
            self.key = key

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self.sort = "mem"
        self.reverse = False
        self.by_worker = False
        """Processes under their owners (workers first) instead of under their GPUs."""
        self.readonly = False
        """Set by the screen: hides the signal key."""

    @property
    def sort_label(self) -> str:
        label = dict(SORTS)[self.sort]
        by = "by worker" if self.by_worker else "by GPU"
        return f"{by} (t) · sort {label} {'▲' if self.reverse else '▼'} (o, O)"

    def action_sort_next(self) -> None:
        keys = [k for k, _ in SORTS]
        self.sort = keys[(keys.index(self.sort) + 1) % len(keys)]
        self.reverse = False
        self.post_message(self.SortChanged())

    def action_tree(self) -> None:
        self.by_worker = not self.by_worker
        self.post_message(self.SortChanged())

    def action_sort_reverse(self) -> None:
        self.reverse = not self.reverse
        self.post_message(self.SortChanged())

    def action_signal(self) -> None:
        key = self.selected_key()
        if key is not None and key.startswith("p-"):
            self.post_message(self.SignalRequested(key))

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "signal":
            return not self.readonly
        return True
