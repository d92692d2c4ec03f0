"""The amdtop Textual app: routes frames from the poller thread to the dashboard, keys to actions."""

from __future__ import annotations

import asyncio
import math
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from rich.markup import escape
from textual import constants
from textual.app import App, SystemCommand
from textual.binding import Binding
from textual.driver import Driver
from textual.screen import Screen

from amdtop import heap
from amdtop.audit.model import AuditReport
from amdtop.exporter import Exporter
from amdtop.pipeline import NodeFrame
from amdtop.service import NodeService
from tui import input_driver, tty_crop
from tui.control_actions import ControlActions
from tui.messages import PollFailed, ServeLeft, SnapshotReady
from tui.screens.audit import AuditScreen
from tui.screens.dashboard import PANES, DashboardScreen
from tui.screens.help import HelpScreen

TTY_CHECK_S = 1.0
"""How often a frame checks that the terminal is still there (an SSH drop: exit, not spin on a dead tty)."""
TTY_FALLBACK_S = 10.0
"""How often the terminal is checked when no frame comes (a poller stuck in a driver call)."""


class AmdtopApp(ControlActions, App[int]):
    """Dashboard and controller of one node service (tests open theirs over a seeded simulator: tests.tui.conftest)."""

    CSS_PATH = "app.tcss"
    TITLE = "amdtop"
    BINDINGS = [
        Binding("q", "quit", "Quit", id="quit"),
        Binding("ctrl+c", "quit", "Quit", show=False, priority=True, id="quit-ctrl-c"),
        Binding("question_mark", "help", "Help", id="help"),
        Binding("l", "launch", "Launch", id="launch", tooltip="launch the selected worker"),
        Binding("r", "restart", "Restart", id="restart", tooltip="restart the selected worker (confirm)"),
        Binding("s", "stop", "Stop", id="stop", tooltip="stop the selected worker (confirm)"),
        Binding("e", "retune", "Retune", id="retune", tooltip="change vllm flags of the selected worker"),
        Binding("a", "ramp", "Ramp", id="ramp", tooltip="load ramp against the selected worker"),
        Binding("x", "exporter", "Exporter", id="exporter", tooltip="start/stop the Prometheus exporter"),
        Binding("b", "probe", "Probe", id="probe", tooltip="measure p2p and all-reduce bandwidth (confirm)"),
        Binding(
            "m",
            "matrix_mode",
            "Link/GB/s/traffic",
            id="matrix-mode",
            tooltip="topology: link type, measured GB/s, or live fabric traffic with GPU health",
        ),
        Binding("p", "pause", "Pause", id="pause", tooltip="pause/resume refresh"),
        Binding("colon", "command_mode", "Command", id="command", tooltip="command mode: launch, ramp, retune NAME"),
        Binding("slash", "filter", "Filter", id="filter", tooltip="filter GPU and worker rows by GPU, worker or flag"),
        *(Binding(str(i), f"pane('{key}')", label, id=f"pane-{key}") for i, (key, label) in enumerate(PANES, start=1)),
        Binding(
            "z", "sleep", "Sleep/Wake", show=False, id="sleep", tooltip="vLLM sleep mode: sleep or wake the selected worker"
        ),
        Binding(
            "d",
            "stacks",
            "Stacks",
            id="stacks",
            show=False,
            tooltip="dump the Python stacks of the selected worker's ranks",
        ),
        Binding("u", "audit", "Audit", id="audit", tooltip="tuning audit: findings with evidence and fixes"),
    ]

    def __init__(
        self,
        service: NodeService,
        *,
        interval: float = 1.0,
        banner: str | None = None,
        clock: Callable[[], float] = time.time,
        state_dir: Path | None = None,
        watch_tty: bool = False,
        exporter_listen: str = "127.0.0.1:9464",
        config_path: Path | None = None,
        settle_heap: bool = False,
    ) -> None:
        """``service``: the node, in-process or an ``amdtop serve``'s (never asked which); the rest is display only:
        ``interval`` as the header says it, the banner, the clock of the header, the state dir the link probe writes
        to, whether to exit when the terminal goes away, the exporter's address, the profile file's name, and whether
        to freeze start-up's objects out of the collector's reach once the first frame is drawn (a real run's
        process, not a test's: amdtop/heap.py). Whoever opened the node starts its polling and closes it."""
        super().__init__()
        tty_crop.install()  # once per process: partial updates send the changed cells only (the bytes over SSH)
        self.service = service
        self.readonly = service.readonly
        self.interval = interval
        self.clock = clock
        self.banner = banner
        self.state_dir = state_dir or Path(".")
        self.watch_tty = watch_tty
        self.settle_heap = settle_heap
        self._tty_checked = -math.inf
        self.on_terminal_lost: Callable[[], None] | None = None
        self.exporter: Exporter | None = None
        self.exporter_listen = exporter_listen
        self.paused = False
        # The dashboard is one subscriber of the node: the exporter and a ramp read its newest frame whatever is drawn
        # (a modal on top or a paused view skip drawing, not publishing).
        self._unsubscribe: Callable[[], None] | None = None
        self.received = 0
        """Frames the node published to this view (the exporter's poll count: one frame per poll of the node)."""
        self.config_path = config_path
        """The worker profiles' file, named where the Workers pane is empty."""
        self._pending: NodeFrame | None = None
        self._drawn_tick = -1
        self.poll_error: str | None = None
        self.dashboard = DashboardScreen(banner)
        self.frames = 0
        self.serve_gone: list[str] = []
        """Why the serve went away while attached (the viewer then exits 1 and says so)."""

    def get_driver_class(self) -> type[Driver]:
        # An input thread that sleeps until a key (Textual's wakes ten times a second), unless the environment names
        # a driver or Textual is not the version it was written for.
        if constants.DRIVER is None and sys.platform != "win32":
            quiet = input_driver.driver_class()
            if quiet is not None:
                return quiet
        return super().get_driver_class()

    def get_default_screen(self) -> DashboardScreen:
        return self.dashboard

    def on_mount(self) -> None:
        self.service.deliver_in(asyncio.get_running_loop())  # attached: the socket is read here, no thread of its own
        self._unsubscribe = self.service.subscribe(
            lambda frame: self.post_message(SnapshotReady(frame)), lambda error: self.post_message(PollFailed(error))
        )
        try:
            self.post_message(SnapshotReady(self.service.latest()))  # the frame published before this view came
        except RuntimeError:
            pass  # no frame yet: the first one comes to the subscription
        if self.watch_tty:
            # A blocked or ignored SIGHUP must not leave us running on a dead tty. Frames check it (two ioctls, at most
            # once a second: a timer of its own woke the app once more every second); this slow timer covers a
            # poller that stopped sending them.
            self.set_interval(TTY_FALLBACK_S, self._check_tty, name="tty-watch")

    def on_unmount(self) -> None:
        # The node is its opener's to close (the dashboard's, the serve's): this view only leaves it.
        if self._unsubscribe is not None:
            self._unsubscribe()
        if self.exporter is not None:
            self.exporter.stop()
        self.service.close()

    # -- frames ----------------------------------------------------------------------------------------------------
    def _frame_checks_tty(self) -> None:
        if self.watch_tty:
            now = time.monotonic()
            if now - self._tty_checked >= TTY_CHECK_S:
                self._tty_checked = now
                self._check_tty()

    def on_serve_left(self, _message: ServeLeft) -> None:
        self.exit(1)

    def on_poll_failed(self, message: PollFailed) -> None:
        self._frame_checks_tty()
        self.poll_error = message.error
        if self.dashboard.last_frame is not None and self.is_running:
            self._show(self.dashboard.last_frame)

    def on_snapshot_ready(self, message: SnapshotReady) -> None:
        if not self.is_running:
            return  # shutting down: the screen stack may already be empty (self.screen would raise)
        self._frame_checks_tty()
        self.received += 1
        if message.frame.tick and message.frame.tick <= self._drawn_tick:
            return  # drawn already (a test's step draws at once what it published)
        self.poll_error = None
        self._pending = message.frame
        # Skip work nobody sees: a modal on top or a paused view keeps the frame for later.
        if self.screen is self.dashboard and not self.paused:
            self._show(message.frame)

    def show_pending(self) -> None:
        """Draw the frame that arrived while a modal was open (called when the dashboard is back on top)."""
        if self._pending is not None and self.screen is self.dashboard and not self.paused:
            self._show(self._pending)

    def _show(self, frame: NodeFrame) -> None:
        if not self.is_running:
            # Shutting down (Pilot's run_test prunes the screens while this loop still drains the poller's frames, and
            # a closing modal resumes the dashboard): the panes are going.
            return
        self._pending = None
        self.frames += 1
        self._drawn_tick = max(self._drawn_tick, frame.tick)
        self.dashboard.apply(frame, self.status_line(frame), self.clock())
        if self.frames == 1 and self.settle_heap:
            self.call_after_refresh(heap.settle)  # after the first paint: its garbage is collected, not frozen

    def status_line(self, frame: NodeFrame) -> str:
        snap = frame.snapshot
        lost = sum(1 for s in snap.gpus if s.lost)
        flags = frame.flags
        when = time.strftime("%H:%M:%S", time.gmtime(self.clock()))
        parts = [
            f"[b]amdtop[/b] {snap.hostname}",
            f"backend {snap.backend}",
            f"{len(snap.topology.gpus)} GPUs" + (f" ([red]{lost} lost[/red])" if lost else ""),
            f"{len(frame.workers)} workers",
            f"every {self.interval:g}s",
            f"[red]{len(flags)} flags[/red]" if flags else "[green]no flags[/green]",
        ]
        live = [i for i in frame.incidents if not i.historic]
        if live:
            parts.append(f"[red]{len(live)} incident{'s' if len(live) != 1 else ''}[/red]")
        for bus in (i for i in live if i.kind == "gpu_init_failed"):
            # GPUs on the bus that never came up: the one fact the operator must see first
            parts.append(f"[red]{escape(bus.summary.split(' (')[0])}[/red]")
        if frame.audit is not None:
            parts.append(audit_badge(frame.audit))
        if self.readonly:
            parts.append("[yellow]read-only[/yellow]")
        if self.paused:
            parts.append("[yellow]PAUSED[/yellow]")
        for error in (*frame.errors, *((self.poll_error,) if self.poll_error else ())):
            parts.append(f"[red]{escape(error)}[/red]")
        return " · ".join(parts) + f" · {when}Z"

    def _check_tty(self) -> None:
        # An SSH drop leaves us without a terminal: exit instead of spinning on a dead tty.
        try:
            alive = sys.stdin.isatty() and sys.stdout.isatty()
        except (ValueError, OSError):
            alive = False
        if not alive:
            if self.on_terminal_lost is not None:
                self.on_terminal_lost()  # does not return: see tui.launch.TerminalLoss
            else:
                self.exit(0)

    # -- actions -----------------------------------------------------------------------------------------------------
    def action_stacks(self) -> None:
        from tui.screens.stacks import StacksScreen

        name = self.dashboard.selected_worker()
        frame = self.dashboard.last_frame
        worker = None if name is None or frame is None else frame.worker(name)
        if worker is None:
            self.notify("select a worker first (its ranks' stacks are dumped)", severity="warning", timeout=4)
            return
        self.push_screen(StacksScreen(worker, self.service.stacks))

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        return self._control_enabled(action)

    def get_system_commands(self, screen: Screen[Any]) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        for binding in self.BINDINGS:
            assert isinstance(binding, Binding)
            action = binding.action.split("(")[0]
            if binding.action.startswith("pane(") or self.check_action(action, ()) is not True:
                continue
            yield SystemCommand(
                binding.description,
                f"{binding.tooltip or binding.description} (key {binding.key})",
                lambda a=binding.action: self.run_action(a),
            )

    def action_help(self) -> None:
        keys = []
        for binding in self.BINDINGS:
            assert isinstance(binding, Binding)
            enabled = self.check_action(binding.action.split("(")[0], ())
            if enabled is False and binding.action.split("(")[0] in ("launch", "restart", "stop", "retune", "ramp"):
                continue
            keys.append(
                (binding.key.replace("question_mark", "?"), binding.tooltip or binding.description, bool(enabled))
            )
        self.push_screen(HelpScreen(keys))

    def action_audit(self) -> None:
        frame = self.newest_frame()
        self.push_screen(AuditScreen(frame.audit if frame else None, readonly=self.readonly))

    def newest_frame(self) -> NodeFrame | None:
        """The newest frame, drawn or held back while a screen is on top."""
        try:
            return self.service.latest()
        except RuntimeError:
            return self.dashboard.last_frame

    def action_command_mode(self) -> None:
        self.dashboard.open_command()

    def action_filter(self) -> None:
        self.dashboard.open_filter()

    def action_pane(self, key: str) -> None:
        self.dashboard.show_pane(key)

    def action_pause(self) -> None:
        self.paused = not self.paused
        if not self.paused and self._pending is not None:
            self._show(self._pending)
        self.notify("refresh paused" if self.paused else "refresh resumed", timeout=2)

    def action_matrix_mode(self) -> None:
        """Topology pane: link classes, then the probe's measured GB/s (when a probe ran), then live fabric traffic
        with GPU health (throttling, ECC), then back."""
        board = self.dashboard
        frame = board.last_frame
        if board.show_traffic:
            board.show_traffic = board.show_gbps = False
        elif board.show_gbps or frame is None or not frame.bandwidth:
            if frame is not None and not frame.bandwidth and not board.show_gbps:
                self.notify("no probe results (run the link probe for GB/s): showing live traffic", timeout=3)
            board.show_gbps, board.show_traffic = False, True
        else:
            board.show_gbps = True
        if frame is not None:
            self._show(frame)


def audit_badge(report: AuditReport) -> str:
    """The header's count of audit findings (``u`` opens them)."""
    c = report.counts()
    if not report.findings:
        return "[green]audit ok[/green]"
    color = "red" if c["error"] else "yellow" if c["warn"] else "cyan"
    return f"[{color}]audit {len(report.findings)}[/{color}]"
