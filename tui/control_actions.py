"""Worker control, ramp and exporter actions of the app (mixed into :class:`tui.app.AmdtopApp`).

Supervisor calls block (processes, HTTP), so they run in thread workers and report back with ``post_message``.
"""

from __future__ import annotations

import os
import threading
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from textual import work

from amdtop.audit.gate import GateRefused
from amdtop.exporter import runtime_exporter
from amdtop.model import WorkerState, WorkerStatus
from amdtop.pipeline import NodeFrame
from amdtop.probe.guard import busy_gpus
from amdtop.ramp.target import check_base_url
from tui.gate_dialog import offer_force
from tui.messages import ControlDone, RetuneDiffReady
from tui.screens.confirm import ConfirmScreen
from tui.screens.retune import RetuneScreen

if TYPE_CHECKING:
    from tui.app import AmdtopApp

CONTROL_ACTIONS = {"launch", "restart", "stop", "retune", "ramp", "sleep"}
PROBE_SIZES = (1 << 20, 16 << 20, 256 << 20, 1 << 30)
"""All-reduce sizes of the TUI's probe, as ``amdtop probe``'s default."""


class FailureInbox:
    """Control failures reported from threads that may run before the app's loop does (the demo's autostart); the
    dashboard drains them on its next frame. ``deque`` appends and pops are atomic, so no lock is needed."""

    def __init__(self) -> None:
        self._items: deque[tuple[str, str]] = deque()

    def put(self, worker: str, text: str) -> None:
        self._items.append((worker, text))

    def drain(self) -> list[tuple[str, str]]:
        out = []
        while self._items:
            out.append(self._items.popleft())
        return out


_INBOX_LOCK = threading.Lock()


class ControlActions:
    """Actions that act on the selected worker or on the node's services."""

    @property
    def failures(self) -> FailureInbox:
        """Where threads report a worker's failed launch; shown on the worker's row and as a notification."""
        with _INBOX_LOCK:
            inbox = self.__dict__.get("_failure_inbox")
            if inbox is None:
                inbox = self.__dict__["_failure_inbox"] = FailureInbox()
        return inbox  # type: ignore[no-any-return]

    def _control_enabled(self: AmdtopApp, action: str) -> bool | None:
        """``check_action`` helper: False hides the key, None shows it disabled."""
        if action in CONTROL_ACTIONS:
            if self.readonly:
                return False
            if self.dashboard.selected_worker() is None:
                return None
        # Exporting is observation: `x` stays in --readonly; the probe loads every GPU, so it does not.
        return not (action == "probe" and self.readonly)

    # -- supervisor calls in threads ---------------------------------------------------------------------------
    @work(thread=True, group="control", exit_on_error=False, description="worker control")
    def _call(self: AmdtopApp, verb: str, name: str, fn: Callable[[], Any]) -> None:
        try:
            result = fn()
        except GateRefused as exc:  # the launch gate's reasons go to a dialog that offers --force
            self.call_from_thread(offer_force, self, verb, name, exc)
            return
        except Exception as exc:  # the supervisor reports bad input and runtime failures as one line
            self.post_message(ControlDone(f"{verb} {name}: {one_line(exc)}", error=True, worker=name))
            return
        # At use: the stopper pulls in the supervisor's process and profile modules, which a dashboard attached to a
        # serve never runs itself.
        from amdtop.supervisor.stopper import StopReport

        if isinstance(result, StopReport):
            text = result.message
        elif isinstance(result, WorkerStatus):
            text = f"{verb} {name}: {result.state.value}"
        else:
            text = str(result) or f"{verb} {name}: done"
        self.post_message(ControlDone(text, worker=name))  # the service woke the node for it: no second wake

    @work(thread=True, group="control", exit_on_error=False, description="retune diff")
    def _retune_diff(self: AmdtopApp, name: str, changes: Mapping[str, str]) -> None:
        try:
            diff = self.service.retune_diff(name, changes)
        except Exception as exc:
            self.post_message(ControlDone(f"retune {name}: {one_line(exc)}", error=True, worker=name))
            return
        self.post_message(RetuneDiffReady(name, changes, diff))

    @work(thread=True, group="probe", exclusive=True, exit_on_error=False, description="link probe")
    def _probe(self: AmdtopApp, gpus: Sequence[int]) -> None:
        try:
            # The node runs it (in-process, or the serve: its process, its state dir) and every view shows the rates.
            results = self.service.probe_links(tuple(gpus), PROBE_SIZES)
        except Exception as exc:  # torch missing, CUDA/ROCm errors: one line, the dashboard goes on
            self.post_message(ControlDone(str(exc) if str(exc).startswith("probe") else f"probe: {exc}", error=True))
            return
        best = max((c.gbps for c in results.copies), default=0.0)
        self.post_message(
            ControlDone(f"probe done: {len(results.copies)} copies, best pair {best:.0f} GB/s; m shows GB/s")
        )
        self.call_from_thread(self._show_probe)

    def _show_probe(self: AmdtopApp) -> None:
        # The next frame carries the fresh results (the pipeline was asked to re-read them): show GB/s from then on.
        self.dashboard.show_gbps = True

    def on_control_done(self: AmdtopApp, message: ControlDone) -> None:
        if message.worker is not None:
            # The row keeps the error until an action on that worker succeeds.
            self.dashboard.set_worker_error(message.worker, message.text if message.error else None)
        self.notify(message.text, severity="error" if message.error else "information", timeout=6)

    def on_retune_diff_ready(self: AmdtopApp, message: RetuneDiffReady) -> None:
        def done(ok: bool | None) -> None:
            if ok:
                self._call("retune", message.worker, lambda: self.service.retune(message.worker, message.changes))

        self.push_screen(
            ConfirmScreen(f"Retune {message.worker} and restart it?\n\n{message.diff}", yes="Retune"), done
        )

    # -- actions ---------------------------------------------------------------------------------------------------
    def action_probe(self: AmdtopApp) -> None:
        frame = self.dashboard.last_frame
        if frame is None or not frame.snapshot.topology.gpus:
            self.notify("no GPUs to probe", severity="warning")
            return
        topology = frame.snapshot.topology
        gpus = [g.index for g in topology.gpus]
        running = {w.name: w for w in frame.workers if w.pid}
        busy = busy_gpus(frame.snapshot, running, gpus, own_pid=os.getpid())
        warning = f"\n\nGPUs in use: {', '.join(busy)}: their workers will slow down." if busy else ""
        question = (
            f"Run the link probe on GPUs {','.join(map(str, gpus))}?\n"
            f"p2p copies between every pair and all-reduce up to 1 GiB per TP group load every GPU.{warning}"
        )

        def done(ok: bool | None) -> None:
            if ok:
                self.notify("link probe running…", timeout=4)
                self._probe(gpus)

        self.push_screen(ConfirmScreen(question, yes="Probe"), done)

    def action_launch(self: AmdtopApp, name: str | None = None) -> None:
        name = name or self.dashboard.selected_worker()
        if name:
            self._call("launch", name, lambda: self.service.launch(name))

    def _confirmed(
        self: AmdtopApp, verb: str, question: str, fn: Callable[[str], Any], name: str | None = None
    ) -> None:
        name = name or self.dashboard.selected_worker()
        if not name:
            return

        def done(ok: bool | None) -> None:
            if ok:
                self._call(verb, name, lambda: fn(name))

        self.push_screen(ConfirmScreen(question.format(name=name), yes=verb.capitalize()), done)

    def action_restart(self: AmdtopApp, name: str | None = None) -> None:
        question = "Restart worker {name}? Its requests in flight are lost."
        self._confirmed("restart", question, self.service.restart, name)

    def action_stop(self: AmdtopApp, name: str | None = None) -> None:
        question = "Stop worker {name}? Every process of its group is terminated."
        self._confirmed("stop", question, self.service.stop, name)

    def action_retune(self: AmdtopApp, name: str | None = None, changes: Mapping[str, str] | None = None) -> None:
        name = name or self.dashboard.selected_worker()
        if not name:
            return
        if changes:
            self._retune_diff(name, changes)  # straight to the diff and its confirmation
            return

        def done(typed: dict[str, str] | None) -> None:
            if typed:
                self._retune_diff(name, typed)

        self.push_screen(RetuneScreen(name, self._retune_start(name)), done)

    def _retune_start(self: AmdtopApp, name: str) -> tuple[str, ...]:
        """The worker's current flags and env (secrets masked) for the dialog; none for a worker without a profile
        (a discovered server) or a node that keeps none."""
        try:
            return tuple(self.service.profile_words(name))
        except Exception:  # a discovered server has no profile
            return ()

    def action_sleep(self: AmdtopApp, name: str | None = None) -> None:
        """``z``: wake a sleeping worker at once; put an awake one to sleep (level 1) after a confirmation."""
        name = name or self.dashboard.selected_worker()
        frame = self.dashboard.last_frame
        worker = next((w for w in frame.workers if w.name == name), None) if frame else None
        control = self.service
        if worker is None or name is None:
            return
        if worker.source != "amdtop":
            self.notify(f"{name}: sleep/wake works on amdtop's own workers only", severity="warning")
            return
        if worker.state is WorkerState.ASLEEP:
            self._call("wake", name, lambda: control.sleep(name, wake=True))
            return
        question = (
            f"Put worker {name} to sleep (level 1)?\nIts weights move to host memory and its KV cache is dropped; "
            "requests wait until it wakes (z again).\nNeeds VLLM_SERVER_DEV_MODE=1 on the server."
        )
        self._confirmed("sleep", question, lambda n: control.sleep(n, level=1), name)

    def action_ramp(self: AmdtopApp, name: str | None = None) -> None:
        name = name or self.dashboard.selected_worker()
        frame = self.dashboard.last_frame
        worker = next((w for w in frame.workers if w.name == name), None) if frame else None
        if worker is None:
            return
        if not worker.url:
            self.notify(f"{name} has no URL to ramp against", severity="warning")
            return
        try:
            check_base_url(worker.url)  # a URL from a record or a process's environment: never trusted as given
        except ValueError as exc:
            self.notify(f"{name}: cannot ramp: {exc}", severity="warning")
            return
        service = self.service

        def apply(n: int) -> None:
            self._call("retune", worker.name, lambda: service.retune(worker.name, {"max-num-seqs": str(n)}))

        def apply_changes(changes: dict[str, str]) -> None:
            self._call("retune", worker.name, lambda: service.retune(worker.name, changes))

        # The node runs the ramp (in-process or in the serve; it outlives this screen and, attached, this viewer) and
        # sends the worker's API key itself; a ramp it runs or ran is shown, not redone. The screen loads when first
        # opened: its chart pulls in textual-plotext and plotext (~1.6 MiB RSS) that a dashboard never needs until a
        # ramp is asked for.
        from tui.screens.ramp import RampScreen
        from tui.service_ramp import ServiceRamp

        screen = RampScreen(
            worker.url, None, worker=worker.name, state_dir=self.state_dir, apply=apply, apply_changes=apply_changes,
            runner=ServiceRamp(service, worker.name, tuple(worker.gpus) or None),
        )  # fmt: skip
        self.push_screen(screen)

    def action_exporter(self: AmdtopApp) -> None:
        if self.exporter is not None:
            self.exporter.stop()
            self.exporter = None
            self.notify("exporter stopped")
            return

        # The node's newest frame, published whatever is drawn: exporting adds no device call, and a modal or a
        # paused view does not leave /metrics behind.
        try:
            self.exporter = runtime_exporter(FramesSeen(self), self.exporter_listen)
            self.exporter.start()
        except Exception as exc:
            self.exporter = None
            self.notify(f"exporter: {exc}", severity="error")
            return
        self.notify(f"exporter serving {self.exporter.url}")


class FramesSeen:
    """The exporter's view of the node through this dashboard: its newest frame, and the frames the node published
    to it as the poll count (one frame per poll)."""

    def __init__(self, app: AmdtopApp) -> None:
        self._app = app

    @property
    def polls(self) -> int:
        return self._app.received

    @property
    def last_duration_s(self) -> float:
        return 0.0  # a view does not time the node's polls

    def latest(self) -> NodeFrame:
        return self._app.service.latest()


def one_line(exc: BaseException) -> str:
    """The first line of an exception's text (a traceback or a tool's usage text never reaches a row)."""
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]
