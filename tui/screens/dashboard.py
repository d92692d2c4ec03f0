"""The main screen: panes built from the discovered GPU list; tabs instead of a grid on small terminals."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Container, Horizontal
from textual.screen import Screen
from textual.widget import Widget
from textual.widgets import Footer, Input, Static, Tab, Tabs

from amdtop.pipeline import NodeFrame
from tui import layout, layout_fit, process_actions, process_view, views
from tui.command_mode import CommandBar, run_command
from tui.filter import FilterBar, filter_rows
from tui.layout import Plan
from tui.repaint import repaint_now
from widgets.gpu_history import GpuHistory
from widgets.gpu_table import GpuTable
from widgets.line_label import LineLabel
from widgets.log_tail import LogTailPane
from widgets.processes_table import ProcessesTable
from widgets.text_pane import TextPane
from widgets.topo_matrix import TopoMatrix
from widgets.workers_table import WorkersTable

if TYPE_CHECKING:
    from tui.app import AmdtopApp

TICK_WIDGETS = (
    "status",
    "clock",
    "pane-gpus",
    "pane-topo",
    "pane-history",
    "pane-groups",
    "pane-numa",
    "pane-workers",
    "pane-logs",
    "pane-procs",
)
"""What a frame repaints: drawn from the frame's handler when they need only a repaint (``tui.repaint``)."""

PANES = (
    ("gpus", "GPUs"),
    ("topo", "Topology"),
    ("groups", "TP groups"),
    ("numa", "NUMA"),
    ("workers", "Workers"),
    ("logs", "Logs"),
    ("procs", "Processes"),
    ("history", "GPU history"),
)
"""Pane keys in the order of their number keys (``1``..``8``)."""
TITLES = {
    "gpus": "1 GPUs",
    "topo": "2 Topology",
    "groups": "3 TP groups",
    "numa": "4 NUMA binding",
    "workers": "5 Workers",
    "logs": "6 Logs",
    "procs": "7 Processes",
    "history": "8 GPU history",
}


class PaneBody(Container):
    """The panes' area: a new size re-plans where the panes go (``tui.layout``)."""

    def on_resize(self) -> None:
        screen = self.screen
        if isinstance(screen, DashboardScreen):
            screen.relayout()


PANES_KEYS = {key: str(i) for i, (key, _) in enumerate(PANES, start=1)}


class DashboardScreen(Screen[None]):
    """Holds the panes; :meth:`apply` draws one frame."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "unzoom", "Unzoom", show=False, id="unzoom", tooltip="back from a zoomed pane"),
    ]

    def __init__(self, banner: str | None = None) -> None:
        super().__init__(id="dashboard")
        self.banner = banner
        self.active_pane = "gpus"
        self.zoomed: str | None = None
        """The pane shown over the whole body (its key pressed again), or none."""
        self.picked: str | None = None
        """The folded pane the tab slot shows (its key or tab picked it)."""
        self.plan = Plan()
        self._last_key: str | None = None
        self.show_gbps = False
        self.show_traffic = False
        """Topology pane: live XGMI/NVLink traffic and GPU health instead of link classes (key m cycles)."""
        self.last_frame: NodeFrame | None = None
        self._status = ""
        self.worker_errors: dict[str, str] = {}
        """Last failed control action per worker, shown on its row until an action on it succeeds."""
        self._worker_rows: dict[str, tuple[object, ...]] = {}
        self.expanded: set[str] = set()
        """Workers whose engine rows are shown (``enter`` on a worker row)."""
        self._now = 0.0
        self._composed = False
        self._tick_widgets: tuple[Widget, ...] = ()
        self.filter_term = ""
        """``/`` filter: GPU and worker rows must mention every word of it."""
        self._gpu_rows: dict[str, tuple[object, ...]] = {}
        self._worker_flags: dict[str, str] = {}
        self._focus_before: Widget | None = None
        self._early: list[tuple[NodeFrame, str, float]] = []
        self._procs_shown: tuple[object, ...] | None = None
        """What the Processes pane last drew from (rows, totals, sort, order, filter, tree), by identity."""
        self.termed: set[tuple[int, float | None]] = set()
        """(pid, start) of processes sent TERM from the Processes pane: the next signal to them is KILL."""

    def compose(self) -> ComposeResult:
        with Horizontal(id="status-bar"):
            yield Static("amdtop", id="status")
            yield LineLabel(id="clock")
        if self.banner:
            yield Static(self.banner, id="banner")
        with PaneBody(id="body"):
            # Every pane placed by tui.layout's plan (absolute boxes); folded ones share a slot under the tabs.
            yield Tabs(*(Tab(label, id=f"tab-{key}") for key, label in PANES), id="tabs")
            yield self._titled(GpuTable(id="pane-gpus"), TITLES["gpus"])
            yield self._titled(TopoMatrix(id="pane-topo"), TITLES["topo"])
            yield self._titled(GpuHistory(id="pane-history"), TITLES["history"])
            yield self._titled(TextPane(id="pane-groups"), TITLES["groups"])
            yield self._titled(TextPane(id="pane-numa"), TITLES["numa"])
            yield self._titled(WorkersTable(id="pane-workers"), TITLES["workers"])
            yield self._titled(LogTailPane(id="pane-logs"), TITLES["logs"])
            yield self._titled(ProcessesTable(id="pane-procs"), TITLES["procs"])
        yield FilterBar(id="filter")
        yield CommandBar(id="command")
        yield Footer()

    @property
    def amdtop(self) -> AmdtopApp:
        """The app, typed: this screen belongs to :class:`~tui.app.AmdtopApp` (which imports this module)."""
        from tui.app import AmdtopApp

        app = self.app
        if not isinstance(app, AmdtopApp):
            raise TypeError(f"DashboardScreen runs in AmdtopApp, not {type(app).__name__}")
        return app

    @staticmethod
    def _titled(widget: Widget, title: str) -> Widget:
        widget.add_class("pane")
        widget.border_title = title
        return widget

    def on_mount(self) -> None:
        self._select("gpus")
        # Keep a widget focused: with focus on nothing, each Footer recompose prunes nodes, which resets focus,
        # which refreshes bindings, which recomposes the Footer again (a loop that cost ~1% CPU when idle).
        self.query_one("#pane-gpus").focus()
        # After the first refresh every pane has composed its own children.
        self.call_after_refresh(self._all_composed)

    def _all_composed(self) -> None:
        # The log pane titles itself on mount; put the numbered title back.
        self.query_one("#pane-logs").border_title = TITLES["logs"]
        process_actions.setup_panes(self)
        self._tick_widgets = tuple(self.query_one(f"#{name}") for name in TICK_WIDGETS)
        self._composed = True
        self.relayout()
        early, self._early = self._early, []
        for args in early:
            self.apply(*args)

    # -- layout ----------------------------------------------------------------------------------------------------
    @property
    def narrow(self) -> bool:
        """Some panes are folded into the tab strip (the terminal is too small to show them all)."""
        return bool(self.plan.folded)

    def _panes(self) -> dict[str, Widget]:
        return {key: self.query_one(f"#pane-{key}") for key, _ in PANES}

    def relayout(self) -> None:
        """Plan where the panes go for the body's size and what they hold now, and place them (a no-op when the plan
        is the one in place)."""
        if not self._composed:
            return
        body = self.query_one("#body", PaneBody)
        width, height = body.size
        if not width or not height:
            return
        panes = self._panes()
        new = layout.plan(
            width,
            height,
            lambda key, w: layout_fit.need_of(panes[key], w),
            panes=tuple(panes),
            widths=layout_fit.widths(self.query_one("#pane-gpus", GpuTable), self.query_one("#pane-topo", TopoMatrix)),
            zoom=self.zoomed,
            pick=self.picked,
        )
        if new == self.plan:
            return
        self.plan = new
        layout_fit.apply(body, panes, self.query_one("#tabs", Tabs), new)
        focused = self.focused
        if focused is None or not focused.display or (focused.parent is not None and not focused.parent.display):
            self._focus_shown()

    def _focus_shown(self) -> None:
        for key in (self.active_pane, *self.plan.shown):
            pane = self.query_one(f"#pane-{key}")
            if key in self.plan.rects and pane.focusable:
                pane.focus()
                return

    def _select(self, key: str) -> None:
        self.active_pane = key
        for pane_key, _ in PANES:
            self.query_one(f"#pane-{pane_key}").set_class(pane_key == key, "active")
        if key in self.plan.folded:
            self.picked = key
            self.relayout()

    def show_pane(self, key: str) -> None:
        """A pane key: focus the pane (showing it in the tab slot when folded); the same key again zooms it to the
        whole body, and again back (k9s-style)."""
        again = key == self._last_key and key == self.active_pane
        self._last_key = key
        if self.zoomed is not None:
            self.zoomed = None if self.zoomed == key else key
        elif again and self._composed and key in self.plan.rects and self._pane_has_focus(key):
            self.zoomed = key
        self._select(key)
        self._title_zoom()
        self.relayout()
        pane = self.query_one(f"#pane-{key}")
        if pane.focusable:
            pane.focus()
        else:
            pane.scroll_visible()

    def _pane_has_focus(self, key: str) -> bool:
        pane = self.query_one(f"#pane-{key}")
        focused = self.focused
        return not pane.focusable or (focused is not None and (focused is pane or pane in focused.ancestors))

    def _title_zoom(self) -> None:
        for key, pane in self._panes().items():
            title = TITLES[key] + (f" (zoomed: {PANES_KEYS[key]} again or esc)" if key == self.zoomed else "")
            if pane.border_title != title:
                pane.border_title = title

    def action_unzoom(self) -> None:
        if self.zoomed is not None:
            self.zoomed = None
            self._title_zoom()
            self.relayout()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "unzoom":
            return self.zoomed is not None
        return True

    @on(Tabs.TabActivated, "#tabs")
    def _tab(self, event: Tabs.TabActivated) -> None:
        if event.tab.id != self.query_one("#tabs", Tabs).active:
            return  # an activation the layout made, overtaken since: not the user's pick
        key = (event.tab.id or "").removeprefix("tab-")
        if key in self.plan.folded and key != self.plan.slot_pane:
            self._select(key)

    # -- data --------------------------------------------------------------------------------------------------------
    def apply(self, frame: NodeFrame, status: str, now: float) -> None:
        if not self._composed:
            # The poller's first frames can beat the panes' own compose (under CPU load: the log pane had no Log
            # yet and amdtop died at start, the tmux test's flake). Keep them, with their log lines, for later.
            self._early.append((frame, status, now))
            return
        self.last_frame = frame
        with self.app.batch_update():
            head, clock = split_clock(status)
            if head != self._status:
                # Fixed one-line bar: no layout pass (a layout pass repaints every scrollbar on screen).
                self._status = head
                self.query_one("#status", Static).update(head, layout=False)
            # The clock has its own 10 cells: a tick repaints those, not the 200-cell bar.
            self.query_one("#clock", LineLabel).set_text(clock)
            self._gpu_rows = views.gpu_rows(frame)
            self._worker_flags = {f"w-{f.worker}": f.kind.value for f in frame.flags if f.worker}
            self._show_gpus()
            caps = (g.power_cap_w for g in frame.snapshot.topology.gpus)
            self.query_one("#pane-history", GpuHistory).push(frame.history, self.amdtop.interval, caps)
            self.query_one("#pane-topo", TopoMatrix).view = views.topo_view(frame, self.show_gbps, self.show_traffic)
            self.query_one("#pane-groups", TextPane).view = views.groups_view(frame)
            self.query_one("#pane-numa", TextPane).view = views.numa_view(frame)
            self._drain_failures()
            self._now = now
            self._worker_rows = views.worker_rows(frame, now, self.expanded)
            self._show_workers()
            kernel = frame.kernel_log.incidents if frame.kernel_log is not None else ()
            if frame.logs is not None or kernel:
                self.query_one("#pane-logs", LogTailPane).show_update(frame.logs, kernel)
            process_actions.show_frame(self, frame)
            self.relayout()  # rows came or went: the panes' shares may move
        repaint_now(self, self._tick_widgets)

    def _show_gpus(self) -> None:
        self.query_one("#pane-gpus", GpuTable).show(filter_rows(self._gpu_rows, self.filter_term))

    def _show_workers(self) -> None:
        before = self.selected_worker()
        table = self.query_one("#pane-workers", WorkersTable)
        rows = filter_rows(self._worker_rows, self.filter_term, self._worker_flags)
        table.show(with_errors(rows, self.worker_errors, len(table.COLUMNS)))
        if self.selected_worker() != before:
            self.refresh_bindings()  # control keys are enabled only with a selected worker

    def _drain_failures(self) -> None:
        for worker, text in self.amdtop.failures.drain():
            self.set_worker_error(worker, text)
            self.notify(text, severity="error", timeout=10)

    def set_worker_error(self, worker: str, text: str | None) -> None:
        """Show ``text`` on the worker's row (``None`` clears it)."""
        if text is None:
            if self.worker_errors.pop(worker, None) is None:
                return
        else:
            self.worker_errors[worker] = text
        if self._worker_rows:
            self._show_workers()

    # -- / filter and : command mode -------------------------------------------------------------------------------
    def open_filter(self) -> None:
        self._focus_before = self.focused
        bar = self.query_one("#filter", FilterBar)
        bar.value = self.filter_term
        bar.open()

    @on(FilterBar.FilterChanged)
    def _filter_changed(self, event: FilterBar.FilterChanged) -> None:
        self.filter_term = event.term.strip()
        subtitle = f"/{self.filter_term}" if self.filter_term else ""
        for pane in ("#pane-gpus", "#pane-workers"):
            self.query_one(pane).border_subtitle = subtitle
        if self._composed:
            self._show_gpus()
            self._show_workers()
            self.show_processes()
        if event.done:
            self._refocus()

    def open_command(self) -> None:
        self._focus_before = self.focused
        workers = [w.name for w in self.last_frame.workers] if self.last_frame else []
        self.query_one("#command", CommandBar).open(workers)

    @on(CommandBar.Run)
    def _run_command(self, event: CommandBar.Run) -> None:
        run_command(self.amdtop, event.command)

    @on(CommandBar.Closed)
    def _command_closed(self) -> None:
        self._refocus()

    def _refocus(self) -> None:
        # Keep a pane focused (see on_mount): back to where the prompt was opened from.
        target = self._focus_before
        if target is None or not target.is_attached or isinstance(target, (FilterBar, Input)):
            target = self.query_one("#pane-gpus")
        target.focus()

    def on_screen_resume(self) -> None:
        self.amdtop.show_pending()

    @on(WorkersTable.RowHighlighted, "#pane-workers")
    def _worker_highlighted(self) -> None:
        self.refresh_bindings()

    def show_processes(self) -> None:
        table = self.query_one("#pane-procs", ProcessesTable)
        frame = self.last_frame
        subtitle = table.sort_label + (f" · /{self.filter_term}" if self.filter_term else "")
        subtitle += process_view.read_at(frame)
        if table.border_subtitle != subtitle:  # each assignment redraws the border
            table.border_subtitle = subtitle
        if frame is None:
            return
        # The pipeline hands the same row tuples on while no row changed: nothing to rebuild, compare or draw.
        shown = (frame.processes, frame.process_totals, table.sort, table.reverse, self.filter_term, table.by_worker)
        if self._procs_shown is not None and all(a is b for a, b in zip(shown, self._procs_shown, strict=True)):
            return
        self._procs_shown = shown
        table.show(process_view.process_rows(frame, table.sort, table.reverse, self.filter_term, table.by_worker))

    @on(ProcessesTable.SortChanged)
    def _procs_sorted(self) -> None:
        self.show_processes()

    @on(ProcessesTable.SignalRequested)
    def _signal_process(self, event: ProcessesTable.SignalRequested) -> None:
        process_actions.request_signal(self, event.key)

    def selected_worker(self) -> str | None:
        key = self.query_one("#pane-workers", WorkersTable).selected_key()
        return None if key is None else views.worker_key(key)

    @on(WorkersTable.ToggleEngines, "#pane-workers")
    def _toggle_engines(self, event: WorkersTable.ToggleEngines) -> None:
        name = views.worker_key(event.row_key)
        self.expanded.symmetric_difference_update({name})
        if self.last_frame is not None:
            self._worker_rows = views.worker_rows(self.last_frame, self._now, self.expanded)
            self._show_workers()


def with_errors(
    rows: dict[str, tuple[object, ...]], errors: dict[str, str], width: int
) -> dict[str, tuple[object, ...]]:
    """Rows padded to ``width`` cells, the last one holding the worker's last error (empty when none)."""
    out: dict[str, tuple[object, ...]] = {}
    for key, cells in rows.items():
        error = errors.get(key.removeprefix("w-"))
        # A control failure wins; else the row's own note (a crashed worker's error line) when it brings one.
        own: object = cells[width - 1] if len(cells) >= width else ""
        note = Text(f"✗ {error}", style="bold red") if error else own
        pad = ("",) * max(0, width - len(cells) - 1)
        out[key] = (*cells[: width - 1], *pad, note)
    return out


def split_clock(status: str) -> tuple[str, str]:
    """``"... · 10:32:25Z"`` -> (the rest, ``"10:32:25Z"``); a line without a trailing clock stays whole."""
    head, sep, tail = status.rpartition(" · ")
    if sep and tail.endswith("Z") and len(tail) <= 12:
        return head, tail
    return status, ""
