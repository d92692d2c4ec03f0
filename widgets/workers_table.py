"""The workers strip: one row per worker (amdtop's own and discovered vLLM servers); ``enter`` on a worker with
several engines (data parallel) shows one row per engine under it."""

from __future__ import annotations

from typing import ClassVar

from textual.binding import Binding, BindingType
from textual.message import Message

from widgets.row_table import RowTable


class WorkersTable(RowTable):
    COLUMNS = (
        ("name", "Worker"),
        ("state", "State"),
        ("gpus", "GPUs"),
        ("port", "Port"),
        ("uptime", "Up"),
        ("restarts", "Rst"),
        ("running", "Run"),
        ("waiting", "Wait"),
        ("kv", "KV"),
        ("tps", "tok/s"),
        ("source", "Src"),
        ("note", ""),  # last: long, and empty unless a control action on the worker failed
    )
    BINDINGS: ClassVar[list[BindingType]] = [
        *RowTable.BINDINGS,
        Binding("enter", "toggle_engines", "Engines", tooltip="show/hide the selected worker's engines (DP ranks)"),
    ]

    class ToggleEngines(Message):
        """``enter`` on a row: expand or collapse the worker's engine rows."""

        def __init__(self, table: WorkersTable, row_key: str) -> None:
            super().__init__()
            self.table = table
            self.row_key = row_key

        @property
        def control(self) -> WorkersTable:
            return self.table

    def action_toggle_engines(self) -> None:
        key = self.selected_key()
        if key is not None:
            self.post_message(self.ToggleEngines(self, key))
