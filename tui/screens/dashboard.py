"""The main screen: panes built from the discovered GPU list; tabs instead of a grid on small terminals."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, TypeVar, overload

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Container, Horizontal
from textual.screen import Screen
from textual.widget import Widget
from textual.widgets import Footer, Input, Static, Tab, Tabs

from amdtop.pipeline import NodeFrame
from tui import layout, layout_fit
from tui.command_mode import CommandBar, run_command
from tui.controller import Controller
from tui.filter_bar import FilterBar
from tui.layout import Plan
from tui.repaint import repaint_now
from tui.viewmodel.dashboard import DashboardView, UiState
from tui.viewmodel.processes import NO_PROCESSES, find_row
from tui.viewmodel.workers import no_workers_text, worker_key
from widgets.gpu_history import GpuHistory
from widgets.gpu_table import GpuTable
from widgets.line_label import LineLabel
from widgets.log_tail import LogTailPane
from widgets.processes_table import ProcessesTable
from widgets.text_pane import TextPane
from widgets.topo_matrix import TopoMatrix
from widgets.workers_table import WorkersTable

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


@dataclass(frozen=True, slots=True)
class Header:
    """What the app adds to a frame for the header: its clock, its interval and its modes."""

    now: float
    interval: float = 1.0
    readonly: bool = False
    paused: bool = False
    poll_error: str | None = None


_W = TypeVar("_W", bound=Widget)


class DashboardScreen(Screen[None]):
    """Holds the panes; :meth:`apply` draws one frame."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "unzoom", "Unzoom", show=False, id="unzoom", tooltip="back from a zoomed pane"),
    ]

    def __init__(
        self,
        controller: Controller,
        *,
        banner: str | None = None,
        config_path: Path | None = None,
        on_resume: Callable[[], None] = lambda: None,
    ) -> None:
        """``controller``: the controls command mode and the Processes pane act through; ``config_path``: the
        profiles named where the Workers pane is empty; ``on_resume``: the app's, when the screen is back on top (it
        draws the frame held back meanwhile)."""
        super().__init__(id="dashboard")
        self.controller = controller
        self.banner = banner
        self.config_path = config_path
        self._on_resume = on_resume
        self.active_pane = "gpus"
        self.zoomed: str | None = None
        """The pane shown over the whole body (its key pressed again), or none."""
        self.picked: str | None = None
        """The folded pane the tab slot shows (its key or tab picked it)."""
        self.plan = Plan()
        self._plan_inputs: tuple[object, ...] | None = None
        """What :attr:`plan` was made from (``tui.layout_fit.signature`` per pane): the same again keeps it."""
        self._found: dict[str, Widget] = {}
        """Selector -> widget, for :meth:`_one`."""
        self._last_key: str | None = None
        self.show_gbps = False
        self.show_traffic = False
        """Topology pane: live XGMI/NVLink traffic and GPU health instead of link classes (key m cycles)."""
        self.last_frame: NodeFrame | None = None
        self.worker_errors: dict[str, str] = {}
        """Last failed control action per worker, shown on its row until an action on it succeeds."""
        self.expanded: set[str] = set()
        """Workers whose engine rows are shown (``enter`` on a worker row)."""
        self._composed = False
        self._tick_widgets: tuple[Widget, ...] = ()
        self.filter_term = ""
        """``/`` filter: GPU and worker rows must mention every word of it."""
        self._focus_before: Widget | None = None
        self._early: list[tuple[NodeFrame, Header]] = []
        self._header = Header(0.0)
        """The app's part of the last frame's header (a redraw of that frame keeps it)."""
        self.view: DashboardView | None = None
        """The view drawn last: each pane's slice of the last frame."""

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

    @staticmethod
    def _titled(widget: Widget, title: str) -> Widget:
        widget.add_class("pane")
        widget.border_title = title
        return widget

    def on_mount(self) -> None:
        self._select("gpus")
        # Keep a widget focused: with focus on nothing, each Footer recompose prunes nodes, which resets focus,
        # which refreshes bindings, which recomposes the Footer again (a loop that cost ~1% CPU when idle).
        self._one("#pane-gpus").focus()
        # After the first refresh every pane has composed its own children.
        self.call_after_refresh(self._all_composed)

    def _all_composed(self) -> None:
        # The log pane titles itself on mount; put the numbered title back.
        self._one("#pane-logs").border_title = TITLES["logs"]
        procs = self._one("#pane-procs", ProcessesTable)
        procs.readonly = self.controller.readonly
        procs.set_empty_text(NO_PROCESSES)
        procs.set_subtitle(procs.sort_label)
        self._one("#pane-workers", WorkersTable).set_empty_text(no_workers_text(self.config_path))
        self._tick_widgets = tuple(self._one(f"#{name}") for name in TICK_WIDGETS)
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
        return {key: self._one(f"#pane-{key}") for key, _ in PANES}

    @overload
    def _one(self, selector: str) -> Widget: ...
    @overload
    def _one(self, selector: str, kind: type[_W]) -> _W: ...
    def _one(self, selector: str, kind: type[Widget] = Widget) -> Widget:
        """``query_one``, looked up once: the panes are composed once and stay; a query walks the DOM (~5 us on the
        dev VM) and a frame made 27 of them (issue 53, session 25). A widget no longer attached is looked up again."""
        widget = self._found.get(selector)
        if widget is None or not widget.is_attached:
            widget = self._found[selector] = self.query_one(selector)
        if not isinstance(widget, kind):
            raise TypeError(f"{selector} is a {type(widget).__name__}, not a {kind.__name__}")
        return widget

    def relayout(self) -> None:
        """Plan where the panes go for the body's size and what they hold now, and place them (a no-op when the plan
        is the one in place)."""
        if not self._composed:
            return
        body = self._one("#body", PaneBody)
        width, height = body.size
        if not width or not height:
            return
        panes = self._panes()
        widths = layout_fit.widths(self._one("#pane-gpus", GpuTable), self._one("#pane-topo", TopoMatrix))
        # The plan is a function of these: when none moved (most frames), it is the one in place.
        inputs = (width, height, widths, self.zoomed, self.picked, tuple(map(layout_fit.signature, panes.values())))
        if inputs == self._plan_inputs:
            return
        self._plan_inputs = inputs
        new = layout.plan(
            width,
            height,
            lambda key, w: layout_fit.need_of(panes[key], w),
            panes=tuple(panes),
            widths=widths,
            zoom=self.zoomed,
            pick=self.picked,
        )
        if new == self.plan:
            return
        self.plan = new
        layout_fit.apply(body, panes, self._one("#tabs", Tabs), new)
        focused = self.focused
        if focused is None or not focused.display or (focused.parent is not None and not focused.parent.display):
            self._focus_shown()

    def _focus_shown(self) -> None:
        for key in (self.active_pane, *self.plan.shown):
            pane = self._one(f"#pane-{key}")
            if key in self.plan.rects and pane.focusable:
                pane.focus()
                return

    def _select(self, key: str) -> None:
        self.active_pane = key
        for pane_key, _ in PANES:
            self._one(f"#pane-{pane_key}").set_class(pane_key == key, "active")
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
        pane = self._one(f"#pane-{key}")
        if pane.focusable:
            pane.focus()
        else:
            pane.scroll_visible()

    def _pane_has_focus(self, key: str) -> bool:
        pane = self._one(f"#pane-{key}")
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
        if event.tab.id != self._one("#tabs", Tabs).active:
            return  # an activation the layout made, overtaken since: not the user's pick
        key = (event.tab.id or "").removeprefix("tab-")
        if key in self.plan.folded and key != self.plan.slot_pane:
            self._select(key)

    # -- data: frame -> view model -> panes --------------------------------------------------------------------------
    def apply(self, frame: NodeFrame, header: Header) -> None:
        """Draw ``frame`` (``header``: the app's part of the status bar)."""
        if not self._composed:
            # The poller's first frames can beat the panes' own compose (under CPU load: the log pane had no Log
            # yet and amdtop died at start, the tmux test's flake). Keep them, with their log lines, for later.
            self._early.append((frame, header))
            return
        self.last_frame = frame
        self._header = header
        with self.app.batch_update():
            self._draw(frame)
            self.relayout()  # rows came or went: the panes' shares may move
        repaint_now(self, self._tick_widgets)

    def _ui(self) -> UiState:
        h = self._header
        procs = self._one("#pane-procs", ProcessesTable)
        return UiState(
            now=h.now, interval=h.interval, readonly=h.readonly, paused=h.paused, poll_error=h.poll_error,
            show_gbps=self.show_gbps, show_traffic=self.show_traffic, filter_term=self.filter_term,
            expanded=frozenset(self.expanded), worker_errors=dict(self.worker_errors), proc_sort=procs.sort,
            proc_reverse=procs.reverse, proc_tree=procs.by_worker,
        )  # fmt: skip

    def _draw(self, frame: NodeFrame) -> None:
        """Build the view of ``frame`` and hand each pane its slice; a slice that is the one drawn is not handed."""
        old = self.view
        view = self.view = DashboardView.of(frame, self._ui(), old)
        if old is None or view.status != old.status:
            # Fixed one-line bar: no layout pass (a layout pass repaints every scrollbar on screen).
            self._one("#status", Static).update(view.status, layout=False)
        # The clock has its own 10 cells: a tick repaints those, not the 200-cell bar.
        self._one("#clock", LineLabel).set_text(view.clock)
        for pane in ("#pane-gpus", "#pane-workers"):
            widget = self._one(pane)
            if (widget.border_subtitle or "") != view.filter_note:
                widget.border_subtitle = view.filter_note
        self._one("#pane-gpus", GpuTable).show(view.gpus)
        if old is None or view.history is not old.history:
            h = view.history
            self._one("#pane-history", GpuHistory).push(h.history, h.interval, h.power_caps)
        self._one("#pane-topo", TopoMatrix).view = view.topo
        self._one("#pane-groups", TextPane).view = view.groups
        self._one("#pane-numa", TextPane).view = view.numa
        self._show_workers(view)
        logs = self._one("#pane-logs", LogTailPane)
        if (old is None or view.logs is not old.logs) and (view.logs.update is not None or view.logs.kernel):
            logs.show_update(view.logs.update, view.logs.kernel)
        # With nothing in the Logs pane, the Processes pane takes its room.
        no_logs = view.logs.empty_note is not None
        if no_logs != self.has_class("no-logs"):
            self.set_class(no_logs, "no-logs")
        note = view.logs.empty_note
        if note is not None and logs.summary_text != note:  # an update is a layout pass: a full repaint
            logs.set_summary(note)
        procs = self._one("#pane-procs", ProcessesTable)
        subtitle = procs.sort_label + view.procs_note
        procs.set_subtitle(subtitle)
        if old is None or view.processes is not old.processes:
            procs.show(view.processes)

    def _redraw(self) -> None:
        """Draw the last frame again after a choice on this screen changed (filter, sort, expanded rows, errors)."""
        if self._composed and self.last_frame is not None:
            self._draw(self.last_frame)

    def _show_workers(self, view: DashboardView) -> None:
        before = self.selected_worker()
        self._one("#pane-workers", WorkersTable).show(view.workers)
        if self.selected_worker() != before:
            self.refresh_bindings()  # control keys are enabled only with a selected worker

    def set_worker_error(self, worker: str, text: str | None) -> None:
        """Show ``text`` on the worker's row (``None`` clears it)."""
        if text is None:
            if self.worker_errors.pop(worker, None) is None:
                return
        else:
            self.worker_errors[worker] = text
        self._redraw()

    # -- / filter and : command mode -------------------------------------------------------------------------------
    def open_filter(self) -> None:
        self._focus_before = self.focused
        bar = self._one("#filter", FilterBar)
        bar.value = self.filter_term
        bar.open()

    @on(FilterBar.FilterChanged)
    def _filter_changed(self, event: FilterBar.FilterChanged) -> None:
        self.filter_term = event.term.strip()
        self._redraw()
        if event.done:
            self._refocus()

    def open_command(self) -> None:
        self._focus_before = self.focused
        workers = [w.name for w in self.last_frame.workers] if self.last_frame else []
        self._one("#command", CommandBar).open(workers)

    @on(CommandBar.Run)
    def _run_command(self, event: CommandBar.Run) -> None:
        run_command(self.controller, event.command, self.last_frame)

    @on(CommandBar.Closed)
    def _command_closed(self) -> None:
        self._refocus()

    def _refocus(self) -> None:
        # Keep a pane focused (see on_mount): back to where the prompt was opened from.
        target = self._focus_before
        if target is None or not target.is_attached or isinstance(target, (FilterBar, Input)):
            target = self._one("#pane-gpus")
        target.focus()

    def on_screen_resume(self) -> None:
        self._on_resume()

    @on(WorkersTable.RowHighlighted, "#pane-workers")
    def _worker_highlighted(self) -> None:
        self.refresh_bindings()

    @on(ProcessesTable.SortChanged)
    def _procs_sorted(self) -> None:
        self._redraw()

    @on(ProcessesTable.SignalRequested)
    def _signal_process(self, event: ProcessesTable.SignalRequested) -> None:
        self.controller.signal(find_row(self.last_frame, event.key))

    def selected_worker(self) -> str | None:
        key = self._one("#pane-workers", WorkersTable).selected_key()
        return None if key is None else worker_key(key)

    @on(WorkersTable.ToggleEngines, "#pane-workers")
    def _toggle_engines(self, event: WorkersTable.ToggleEngines) -> None:
        self.expanded.symmetric_difference_update({worker_key(event.row_key)})
        self._redraw()
