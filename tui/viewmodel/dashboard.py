"""One pass over a frame: :meth:`DashboardView.of` builds every pane's slice of the dashboard (rows, lines, the
matrix's view, the header) from the frame and the screen's own state. Pure: no Textual (a test reads it directly;
import-linter keeps Textual out of ``tui.viewmodel``).

The screen hands each pane its slice and leaves a pane alone when its slice is the one it drew last; the panes that
take a frame's news (the history sweep, the log tail) are fed once per frame, never again for a redraw of the same
frame (a key that changes a mode rebuilds the view of the frame already drawn).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from rich.text import Text

from amdtop.logread.incidents.model import Incident
from amdtop.logread.rccl.monitor import LogUpdate
from amdtop.pipeline import NodeFrame
from amdtop.pipeline.frame import GpuHistory
from tui.viewmodel import processes
from tui.viewmodel.filter import filter_rows
from tui.viewmodel.gpus import gpu_rows
from tui.viewmodel.header import split_clock, status_line
from tui.viewmodel.topology import TopoView, groups_view, numa_view, topo_view
from tui.viewmodel.workers import with_errors, worker_rows

Rows = dict[str, tuple[object, ...]]
"""A table pane's rows: cells by row key, in display order."""

WORKER_CELLS = 12
"""Cells of a Workers row (``widgets.workers_table.WorkersTable.COLUMNS``): the last one holds the row's note."""


@dataclass(frozen=True, slots=True)
class UiState:
    """What the view reads besides the frame: the app's header state and the screen's modes and choices."""

    now: float
    """Wall clock of the header and the workers' uptime."""
    interval: float = 1.0
    """Seconds between frames, as the header says it and the history's time axis counts."""
    readonly: bool = False
    paused: bool = False
    poll_error: str | None = None
    """The node's last failed poll, shown until a frame comes."""
    show_gbps: bool = False
    """Topology: the probe's measured GB/s instead of link classes (key m)."""
    show_traffic: bool = False
    """Topology: live fabric traffic and GPU health (key m)."""
    filter_term: str = ""
    """``/``: GPU, worker and process rows must mention every word of it."""
    expanded: frozenset[str] = frozenset()
    """Workers whose engine rows are shown."""
    worker_errors: Mapping[str, str] = field(default_factory=dict)
    """Last failed control action per worker, shown on its row."""
    proc_sort: str = "mem"
    proc_reverse: bool = False
    proc_tree: bool = False
    """Processes under their owners instead of per GPU."""


@dataclass(frozen=True, slots=True)
class HistorySlice:
    """What the history pane takes from a frame: each GPU's newest point, the time step, the power caps."""

    history: Sequence[GpuHistory]
    interval: float
    power_caps: tuple[float | None, ...]


@dataclass(frozen=True, slots=True)
class LogSlice:
    """What the Logs pane takes from a frame: the log update (new lines once) and the kernel's incidents, or, with no
    worker log followed, the line the empty pane says."""

    update: LogUpdate | None
    kernel: tuple[Incident, ...]
    empty_note: str | None
    """What the pane says when no worker's log is followed (the Processes pane then takes its room)."""


@dataclass(frozen=True, slots=True)
class DashboardView:
    """Every pane's slice of one frame."""

    frame: NodeFrame
    status: str
    """The header without its clock (markup)."""
    clock: str
    """``HH:MM:SSZ``: its own cells."""
    gpus: Rows
    topo: TopoView
    groups: tuple[Text, ...]
    numa: tuple[Text, ...]
    workers: Rows
    worker_names: tuple[str, ...]
    """Every worker of the frame (command mode completes them)."""
    processes: Rows
    procs_note: str
    """What the Processes pane's subtitle says after its sort: the filter and when the process lists were read."""
    filter_note: str
    """The GPU and Workers panes' subtitle: the filter."""
    history: HistorySlice
    logs: LogSlice
    procs_key: tuple[object, ...]
    """What the process rows were built from, compared by identity: the pipeline hands the same row tuples on while
    no row changed, so the next view takes the rows as they are."""

    @classmethod
    def of(cls, frame: NodeFrame, ui: UiState, previous: DashboardView | None = None) -> DashboardView:
        """The view of ``frame``; ``previous`` (the view drawn last) lends the slices whose inputs did not change."""
        term = ui.filter_term
        head, clock = split_clock(
            status_line(
                frame, now=ui.now, interval=ui.interval, readonly=ui.readonly, paused=ui.paused,
                poll_error=ui.poll_error,
            )
        )  # fmt: skip
        worker_flags = {f"w-{f.worker}": f.kind.value for f in frame.flags if f.worker}
        workers = filter_rows(worker_rows(frame, ui.now, ui.expanded), term, worker_flags)
        procs_key = (frame.processes, frame.process_totals, ui.proc_sort, ui.proc_reverse, term, ui.proc_tree)
        if previous is not None and all(a is b for a, b in zip(procs_key, previous.procs_key, strict=True)):
            procs = previous.processes
        else:
            procs = processes.process_rows(frame, ui.proc_sort, ui.proc_reverse, term, ui.proc_tree)
        if previous is not None and previous.frame is frame:
            history = previous.history  # the same frame: its points are drawn already
        else:
            caps = tuple(g.power_cap_w for g in frame.snapshot.topology.gpus)
            history = HistorySlice(frame.history, ui.interval, caps)
        kernel = frame.kernel_log.incidents if frame.kernel_log is not None else ()
        no_logs = frame.logs is None or not frame.logs.workers
        logs = LogSlice(frame.logs, tuple(kernel), processes.no_logs_text(len(frame.workers)) if no_logs else None)
        if previous is not None and previous.frame is frame and previous.logs == logs:
            logs = previous.logs
        return cls(
            frame=frame,
            status=head,
            clock=clock,
            gpus=filter_rows(gpu_rows(frame), term),
            topo=topo_view(frame, ui.show_gbps, ui.show_traffic),
            groups=groups_view(frame),
            numa=numa_view(frame),
            workers=with_errors(workers, ui.worker_errors, WORKER_CELLS),
            worker_names=tuple(w.name for w in frame.workers),
            processes=procs,
            procs_note=(f" · /{term}" if term else "") + processes.read_at(frame),
            filter_note=f"/{term}" if term else "",
            history=history,
            logs=logs,
            procs_key=procs_key,
        )
