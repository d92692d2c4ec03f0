"""One frame of dashboard data: built in the poller thread, read by the UI; all parts immutable."""

from __future__ import annotations

from dataclasses import dataclass, field

from amdtop.analysis.numa import GroupWarning, WorkerBinding
from amdtop.model import Flag, NodeSnapshot, WorkerStatus


@dataclass(frozen=True, slots=True)
class Frame:
    """Everything the panes draw from one poll."""

    snapshot: NodeSnapshot
    workers: tuple[WorkerStatus, ...] = ()
    flags: tuple[Flag, ...] = ()
    group_warnings: tuple[GroupWarning, ...] = ()
    bindings: tuple[tuple[str, WorkerBinding], ...] = ()
    history: tuple[tuple[int, tuple[float, ...]], ...] = ()
    log_lines: tuple[object, ...] = field(default=())
    log_dropped: int = 0
    log_summary: str | None = None

    def history_of(self, gpu: int) -> tuple[float, ...]:
        for index, values in self.history:
            if index == gpu:
                return values
        return ()

    def binding_of(self, worker: str) -> WorkerBinding | None:
        for name, binding in self.bindings:
            if name == worker:
                return binding
        return None
