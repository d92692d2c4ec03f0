"""The workers strip: one row per worker (amdtop's own and discovered vLLM servers)."""

from __future__ import annotations

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
