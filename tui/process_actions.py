"""The Processes pane's part of the dashboard: what empty panes say, the layout when Logs is empty, signals."""

from __future__ import annotations

import os
import signal
from typing import TYPE_CHECKING

from amdtop.gpuprocs.signals import Refusal, plan_signal
from amdtop.pipeline import NodeFrame
from tui.process_view import find_row
from tui.screens.confirm import ConfirmScreen
from widgets.log_tail import LogTailPane
from widgets.processes_table import ProcessesTable
from widgets.workers_table import WorkersTable

if TYPE_CHECKING:
    from tui.app import AmdtopApp
    from tui.screens.dashboard import DashboardScreen

NO_PROCESSES = "no process holds GPU memory"


def no_workers_text(config: object | None) -> str:
    """What the empty Workers pane says: what would fill it and how."""
    where = f"the profiles in {config}" if config else "the profiles of --config PATH"
    return f"no workers: l launches one from {where} (a [[worker]] table per worker); vLLM servers running are found"


def no_logs_text(workers: int) -> str:
    """What the empty Logs pane says."""
    if not workers:
        return "no logs: the RCCL/NCCL lines of amdtop's workers show here once one runs (5 Workers says how)"
    return "no communicator seen yet: set NCCL_DEBUG=INFO in a profile's [worker.env] to follow RCCL/NCCL init here"


def setup_panes(board: DashboardScreen) -> None:
    """Once the panes are composed: the empty texts and the read-only state of the signal key."""
    app = board.amdtop
    procs = board.query_one("#pane-procs", ProcessesTable)
    procs.readonly = app.readonly
    procs.set_empty_text(NO_PROCESSES)
    board.query_one("#pane-workers", WorkersTable).set_empty_text(no_workers_text(app.config_path))
    procs.border_subtitle = procs.sort_label


def show_frame(board: DashboardScreen, frame: NodeFrame) -> None:
    """Draw the frame's processes; with nothing in the Logs pane, the Processes pane takes its room."""
    no_logs = frame.logs is None or not frame.logs.workers
    if no_logs != board.has_class("no-logs"):
        board.set_class(no_logs, "no-logs")
    if no_logs:
        text = no_logs_text(len(frame.workers))
        logs = board.query_one("#pane-logs", LogTailPane)
        if getattr(logs, "_summary", None) != text:  # an update is a layout pass: a full repaint of the screen
            logs.set_summary(text)
    board.show_processes()


def request_signal(board: DashboardScreen, key: str) -> None:
    """``k`` on a process row: refuse (saying why) or ask, naming pid, user and command, then send."""
    app = board.amdtop
    row = find_row(board.last_frame, key)
    if row is None:
        app.notify("that process is no longer on a GPU", severity="warning")
        return
    plan = plan_signal(row, readonly=app.readonly, euid=os.geteuid(), termed=frozenset(board.termed))
    if isinstance(plan, Refusal):
        if plan.worker is not None and not app.readonly:
            app.notify(plan.reason, timeout=4)
            app.action_stop(plan.worker)  # amdtop's own worker stops as a whole, through the supervisor
        else:
            app.notify(plan.reason, severity="warning", timeout=6)
        return

    def done(ok: bool | None) -> None:
        if ok:
            # The node sends it (in-process, or the serve on its host) and refuses the same way it plans here.
            send(app, board, row.pid, row.started_at, plan.signum == signal.SIGKILL)

    app.push_screen(ConfirmScreen(plan.question, yes=f"Send {plan.name}"), done)


def send(app: AmdtopApp, board: DashboardScreen, pid: int, started_at: object, kill: bool) -> None:
    """``service.signal_process`` off the UI thread; its answer (or its one-line refusal) as a notification."""

    def call() -> None:
        try:
            text = app.service.signal_process(pid, kill=kill)
        except Exception as exc:
            app.call_from_thread(app.notify, str(exc).splitlines()[0], severity="error", timeout=8)
            return

        def sent() -> None:
            if not kill:
                board.termed.add((pid, started_at))
            app.notify(text + ("" if kill else "; k again sends KILL if it stays"), timeout=6)

        app.call_from_thread(sent)

    app.run_worker(call, thread=True, group="control", exit_on_error=False, description="signal a GPU process")
