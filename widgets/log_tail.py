"""The RCCL/NCCL log tail pane: per-communicator summary above a coloured, filterable, capped tail."""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from typing import TypeVar

from rich.cells import cell_len
from rich.highlighter import Highlighter
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.reactive import reactive
from textual.widget import Widget
from textual.widgets import Input, Log, Static

from amdtop.logread.incidents.model import Incident
from amdtop.logread.rccl.lines import ERROR, WARN, LogLine, LogLines, classify
from amdtop.logread.rccl.monitor import LogUpdate
from amdtop.logread.rccl.views import WorkerLogs
from amdtop.model import Flag, FlagKind
from widgets.log_summary import render_logs

W = TypeVar("W", bound=Widget)
FILTERS = ("all", "problems", "transport")
_BUILD_PATH = "_pathname_so_that_rpms"  # RCCL >= 2.22 "/longer_pathname...", older "/long_pathname..."


class LevelHighlighter(Highlighter):
    """Colour a whole line by its level; transport fallbacks stand out."""

    def highlight(self, text: Text) -> None:
        plain = text.plain
        level = classify(plain)
        if level == ERROR:
            text.stylize("bold red")
        elif level == WARN:
            text.stylize("yellow")
        elif " via SHM" in plain or " via NET" in plain:
            text.stylize("magenta")
        elif " via P2P" in plain or "Connected all" in plain:
            text.stylize("green")
        elif "NCCL INFO" not in plain:
            text.stylize("dim")


class TailLog(Log):
    """Textual's ``Log`` measuring each batch's width where it is written.

    ``Log.write_lines`` (Textual 8.2.8) starts a worker thread per write to measure the new lines (``_update_size``),
    and that worker's state messages and its hand-back through ``call_from_thread`` came with every batch of a
    worker's log lines, once a second while the workers log. A batch here is a tick's lines (at most ``max_lines``):
    measured in place, then handed to the same ``_update_maximum_width``."""

    def _update_size(self, updates: int, lines: list[str]) -> None:  # type: ignore[override]
        if lines:
            process = self._process_line
            self._update_maximum_width(updates, max(cell_len(process(line)) for line in lines))

    def on_resize(self) -> None:
        # Lines that came while the tail had no room on screen were kept in the pane's buffer, not written here.
        pane = self.parent
        if isinstance(pane, LogTailPane):
            pane.catch_up()


class LogTailPane(Widget, can_focus=True):
    """Tail of the workers' logs with a summary line on top.

    Feed it batches with :meth:`feed`; set the communicator summary with :meth:`set_summary`.
    Keys: ``e`` errors/warnings only, ``t`` transport lines, ``w`` cycle one worker, ``/`` search,
    ``p`` pause/follow, ``c`` clear filters.
    """

    DEFAULT_CSS = """
    LogTailPane { height: 1fr; layout: vertical; border: round $panel; }
    LogTailPane > #logs-summary { height: auto; max-height: 12; color: $text; padding: 0 1; }
    LogTailPane > #logs-status { height: 1; color: $text-muted; padding: 0 1; }
    LogTailPane > #logs-search { display: none; height: 3; }
    LogTailPane > #logs-search.-open { display: block; }
    LogTailPane > Log { height: 1fr; scrollbar-size-horizontal: 0; }
    """

    BINDINGS = [
        Binding("e", "filter('problems')", "Errors/warn", id="logs-errors"),
        Binding("t", "filter('transport')", "Transport", id="logs-transport"),
        Binding("w", "cycle_worker", "Worker", id="logs-worker"),
        Binding("slash", "search", "Search", id="logs-search"),
        Binding("p", "toggle_pause", "Pause", id="logs-pause"),
        Binding("c", "clear_filters", "All lines", id="logs-clear"),
        Binding("escape", "close_search", "Close search", show=False, id="logs-close-search"),
    ]

    mode: reactive[str] = reactive("all")
    """Line filter: ``all``, ``problems`` (errors and warnings) or ``transport``."""
    worker: reactive[str | None] = reactive(None)
    """Show only this worker's lines (``None``: every worker)."""
    search: reactive[str] = reactive("")
    """Case-insensitive substring every shown line must contain."""
    paused: reactive[bool] = reactive(False)
    """When paused, lines are kept but the tail does not move."""

    def __init__(
        self, *, max_lines: int = 2000, name: str | None = None, id: str | None = None, classes: str | None = None
    ) -> None:
        super().__init__(name=name, id=id, classes=classes)
        self.max_lines = max_lines
        self._buffer: deque[LogLine] = deque(maxlen=max_lines * 4)
        self._summary_shown: Text | None = None
        self._status_shown: str | None = None
        self._workers: list[str] = []
        self._pending = 0
        self._dropped = 0
        self._summary: str | Text = "no communicator seen yet"
        self._flags: tuple[Flag, ...] = ()
        self._state: tuple[tuple[WorkerLogs, ...], tuple[Flag, ...], tuple[Incident, ...]] | None = None
        self.tail_behind = False
        """Lines came while the tail had no room on screen: they are in the buffer, written when it is shown."""

    def compose(self) -> ComposeResult:
        yield Static("no communicator seen yet", id="logs-summary", markup=False)
        yield Static("", id="logs-status", markup=False)
        yield Input(placeholder="search (enter applies, empty clears)", id="logs-search")
        log = TailLog(max_lines=self.max_lines, highlight=True, id="logs-log")
        log.highlighter = LevelHighlighter()
        yield log

    def on_mount(self) -> None:
        if not self.border_title:
            self.border_title = "logs"
        self._show_summary()
        self._rebuild()  # lines fed before the children were composed

    # -- data in ---------------------------------------------------------------------------------------------
    def feed(self, lines: Sequence[LogLine], dropped: int = 0) -> None:
        """Append a batch of lines (one write to the tail); ``dropped`` counts lines the follower skipped."""
        if dropped:
            self._dropped += dropped
        if not lines and not dropped:
            return
        workers = lines.workers() if isinstance(lines, LogLines) else dict.fromkeys(line.worker for line in lines)
        for worker in workers:
            if worker not in self._workers:
                self._workers.append(worker)
        # only the newest lines can stay in the buffer or reach the screen: the older lines of a flood are never
        # built (the monitor hands LogLines, which build a line when it is read)
        keep = self._buffer.maxlen or len(lines)
        self._buffer.extend(lines[-keep:] if len(lines) > keep else lines)
        if self.paused:
            self._pending += len(lines)
            self._update_status()
            return
        # the newest matches, at most what the Log keeps (the dropped note takes one of its lines)
        room = self.max_lines - (1 if dropped else 0)
        shown: list[str] = []
        for line in reversed(lines) if room > 0 else ():
            if self._match(line):
                shown.append(self._format(line))
                if len(shown) == room:
                    break
        shown.reverse()
        if dropped:
            shown.append(f"… {dropped} lines dropped (log flood; the tail is catching up)")
        log = self._child(Log)
        if shown and log is not None:
            if self.tail_shown(log):
                if self.tail_behind:
                    self._rebuild()  # the buffer holds these lines too
                    return
                log.write_lines(shown)
            else:
                # The tail has no room on screen (the summary fills a short pane, or the pane is not shown): a write
                # grows the Log's virtual size, which lays out the whole screen, and repaints a widget the
                # compositor cannot find, which rebuilds its full map: a relayout every tick while workers log,
                # for lines no one sees. They wait in the buffer instead (TailLog.on_resize writes them).
                self.tail_behind = True
        self._update_status()

    def tail_shown(self, log: Log) -> bool:
        """The tail has rows on screen: the pane's content is taller than what sits above the tail (the summary, at
        most 12 lines, the status line, the search box while open). Measured from the last layout's sizes, not by
        asking the compositor where the Log is (that lookup rebuilds its full map for a widget it does not show)."""
        if not (self.display and log.display and log.size.height):
            return False
        above = sum(w.outer_size.height for w in self.children if w is not log and w.display)
        return self.content_size.height > above

    def catch_up(self) -> None:
        """Write the lines that came while the tail was not shown, once it is."""
        log = self._child(Log)
        if self.tail_behind and log is not None and self.tail_shown(log):
            self._rebuild()

    def on_resize(self) -> None:
        self.catch_up()

    @property
    def summary_text(self) -> str | Text:
        """What the summary above the tail says (set or rendered)."""
        return self._summary

    def set_summary(self, text: str | Text) -> None:
        """Show the per-communicator summary (plain text or Rich ``Text``) above the tail."""
        self._summary = text or "no communicator seen yet"
        self._show_summary()

    def set_flags(self, flags: Sequence[Flag]) -> None:
        """Show log-derived flags (errors, timeouts, transport fallbacks) under the summary, errors first."""
        flags = tuple(flags)
        if flags != self._flags:
            self._flags = flags
            self._show_summary()

    def show_update(self, update: LogUpdate | None, kernel: Sequence[Incident] = ()) -> None:
        """Apply one :class:`amdtop.logread.rccl.monitor.LogUpdate` (new lines, dropped count, communicators and flags) and
        the kernel log's incidents of the same frame."""
        if update is not None:
            self.feed(update.lines, update.dropped)
        workers, flags = (update.workers, update.flags) if update is not None else ((), ())
        self.show_logs(workers, flags, kernel)

    def show_logs(self, workers: Sequence[WorkerLogs], flags: Sequence[Flag], kernel: Sequence[Incident] = ()) -> None:
        """Render the head from typed values: per worker its communicators, every pair's transport (fallbacks and
        inter-node pairs marked), grouped warnings; every log-derived flag with its message, worker and GPUs."""
        state = (tuple(workers), tuple(flags), tuple(kernel))
        if state == self._state:
            return
        self._state = state
        self._flags = ()
        self._summary = render_logs(workers, flags, kernel=kernel)
        self._show_summary()

    @property
    def following(self) -> bool:
        """Some worker's log is followed or has sent lines: the tail has lines to show, now or soon."""
        return bool(self._workers) or bool(self._state is not None and self._state[0])

    def show_worker(self, worker: str | None) -> None:
        """Show only ``worker``'s lines (``None``: all), e.g. when a TP group is selected elsewhere."""
        if worker is not None and worker not in self._workers:
            self._workers.append(worker)
        self.worker = worker

    def _show_summary(self) -> None:
        text = Text(self._summary) if isinstance(self._summary, str) else self._summary.copy()
        for flag in self._flags:
            style = "bold red" if flag.kind in (FlagKind.NCCL_ERROR, FlagKind.NCCL_TIMEOUT) else "bold magenta"
            text.append(f"\n! {flag.kind.value}: {flag.message}", style=style)
        summary = self._child(Static, "#logs-summary")
        # Static.update is a layout pass (a repaint of the screen): only for a summary that reads differently.
        if summary is not None and text != self._summary_shown:
            self._summary_shown = text
            summary.update(text)
            if self.tail_behind:
                self.call_after_refresh(self.catch_up)  # a shorter summary may leave the tail room

    # -- filtering -------------------------------------------------------------------------------------------
    def _match(self, line: LogLine) -> bool:
        if not line.text or line.text.isspace():
            return False  # RCCL puts an empty line before each WARN: noise in a tail
        if self.worker is not None and line.worker != self.worker:
            return False
        if self.mode == "problems" and line.level not in (ERROR, WARN):
            return False
        if self.mode == "transport" and not line.transport:
            return False
        return not self.search or self.search.lower() in line.text.lower()

    def _format(self, line: LogLine) -> str:
        text = line.text
        i = text.find(_BUILD_PATH)
        if i >= 0:
            # RCCL package builds put a ~120-character build path before each WARN's file: keep src/<file>
            i = text.rfind(" ", 0, i) + 1
            end = text.find(" ", i)
            j = text.rfind("/src/", i, end if end > 0 else len(text))
            if j > i:
                text = text[:i] + "…" + text[j:]
        return f"{line.worker}| {text}" if len(self._workers) > 1 else text

    def _child(self, kind: type[W], selector: str | None = None) -> W | None:
        # Frames arrive from the poller thread on their own schedule: before this pane has composed its children
        # (the lines wait in the buffer and are drawn on mount) or while the app tears the screen down.
        return next(iter(self.query(selector or kind).results(kind)), None)

    def _rebuild(self) -> None:
        log = self._child(Log)
        if log is None:
            return
        log.clear()
        self.tail_behind = False
        shown = [self._format(line) for line in self._buffer if self._match(line)]
        log.write_lines(shown[-self.max_lines :])
        self._pending = 0
        self._update_status()

    def _update_status(self) -> None:
        parts = [f"filter: {self.mode}"]
        if self.worker is not None:
            parts.append(f"worker: {self.worker}")
        if self.search:
            parts.append(f"search: {self.search!r}")
        parts.append(f"PAUSED ({self._pending} new)" if self.paused else "following")
        if self._dropped:
            parts.append(f"{self._dropped} lines dropped")
        parts.append("keys: e t w / p c")
        status = self._child(Static, "#logs-status")
        line = "  ·  ".join(parts)
        if status is not None and line != self._status_shown:  # unchanged at nearly every batch of lines
            self._status_shown = line
            status.update(line)

    def watch_mode(self) -> None:
        if self.is_mounted:
            self._rebuild()

    def watch_worker(self) -> None:
        if self.is_mounted:
            self._rebuild()

    def watch_search(self) -> None:
        if self.is_mounted:
            self._rebuild()

    def watch_paused(self, paused: bool) -> None:
        if self.is_mounted and not paused:
            self._rebuild()
        elif self.is_mounted:
            self._update_status()

    # -- actions ---------------------------------------------------------------------------------------------
    def action_filter(self, mode: str) -> None:
        self.mode = "all" if self.mode == mode else mode

    def action_cycle_worker(self) -> None:
        choices: list[str | None] = [None, *self._workers]
        self.worker = choices[(choices.index(self.worker) + 1) % len(choices)] if self.worker in choices else None

    def action_search(self) -> None:
        box = self.query_one("#logs-search", Input)
        box.add_class("-open")
        box.value = self.search
        box.focus()

    def action_close_search(self) -> None:
        box = self.query_one("#logs-search", Input)
        if box.has_class("-open"):
            box.remove_class("-open")
            self.focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.search = event.value.strip()
        event.input.remove_class("-open")
        self.focus()

    def action_toggle_pause(self) -> None:
        self.paused = not self.paused

    def action_clear_filters(self) -> None:
        self.mode, self.worker, self.search = "all", None, ""
