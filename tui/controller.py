"""The dashboard's controls over its node service: launch, restart, stop, retune, ramp, probe, audit fix, signal,
sleep and stacks. Command mode, the gate dialog, the Processes pane and the audit screen act through it; the app's
keys name the worker (the selected one) and call it.

Service calls block (processes, HTTP), so they run in thread workers of the app and report back with
``post_message`` (``tui.messages``); destructive ones ask first (``ConfirmScreen``).
"""

from __future__ import annotations

import os
import signal
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from textual.app import App

from amdtop.audit.gate import GateRefused
from amdtop.audit.model import Finding
from amdtop.gpuprocs import ProcessRow
from amdtop.gpuprocs.signals import Refusal, plan_signal
from amdtop.model import Topology, WorkerState, WorkerStatus
from amdtop.pipeline import NodeFrame
from amdtop.probe.cache import save_results
from amdtop.probe.guard import busy_gpus
from amdtop.ramp.target import check_base_url
from amdtop.service import NodeService
from tui.gate_dialog import gate_text
from tui.messages import ControlDone, ProbeDone, RetuneDiffReady, WorkerError
from tui.screens.confirm import ConfirmScreen
from tui.screens.retune import RetuneScreen

CONTROL_ACTIONS = {"launch", "restart", "stop", "retune", "ramp", "sleep", "adopt"}
PROBE_SIZES = (1 << 20, 16 << 20, 256 << 20, 1 << 30)
"""All-reduce sizes of the TUI's probe, as ``amdtop probe``'s default."""


class FailureInbox:
    """Control failures reported from threads that may run before the app's loop does (the demo's autostart); the
    app drains them on its next frame. ``deque`` appends and pops are atomic, so no lock is needed."""

    def __init__(self) -> None:
        self._items: deque[tuple[str, str]] = deque()

    def put(self, worker: str, text: str) -> None:
        self._items.append((worker, text))

    def drain(self) -> list[tuple[str, str]]:
        out = []
        while self._items:
            out.append(self._items.popleft())
        return out


class Controller:
    """Acts on ``service`` for the app ``app`` (its thread workers, dialogs and notifications); ``state_dir`` is
    where the link probe writes its results (the node reads them from there)."""

    def __init__(self, service: NodeService, app: App[Any], *, state_dir: Path) -> None:
        self.service = service
        self.app = app
        self.readonly = service.readonly
        self.state_dir = state_dir
        self.termed: set[tuple[int, float | None]] = set()
        """(pid, start) of processes sent TERM from the Processes pane: the next signal to them is KILL."""

    def enabled(self, action: str, selected: str | None) -> bool | None:
        """``check_action``'s answer for a control key: False hides it, None shows it disabled (no worker
        ``selected``)."""
        if action in CONTROL_ACTIONS:
            if self.readonly:
                return False
            if selected is None:
                return None
        # Exporting is observation: `x` stays in --readonly; the probe loads every GPU, so it does not.
        return not (action == "probe" and self.readonly)

    def newest_frame(self) -> NodeFrame | None:
        """The node's newest frame (``None`` before its first)."""
        try:
            return self.service.latest()
        except RuntimeError:
            return None

    # -- service calls in threads -----------------------------------------------------------------------------------
    def call(self, verb: str, name: str, fn: Callable[[], Any]) -> None:
        """Run ``fn`` (a service call acting on worker ``name``) in a thread; its outcome is a notification and, on a
        failure, the worker's row."""
        self.app.run_worker(
            lambda: self._call(verb, name, fn), thread=True, group="control", exit_on_error=False,
            description="worker control",
        )  # fmt: skip

    def _call(self, verb: str, name: str, fn: Callable[[], Any]) -> None:
        try:
            result = fn()
        except GateRefused as exc:  # the launch gate's reasons go to a dialog that offers --force
            self.app.call_from_thread(self.offer_force, verb, name, exc)
            return
        except Exception as exc:  # the supervisor reports bad input and runtime failures as one line
            self.app.post_message(ControlDone(f"{verb} {name}: {one_line(exc)}", error=True, worker=name))
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
        self.app.post_message(ControlDone(text, worker=name))
        self.service.wake()  # a frame now: the workers changed

    def offer_force(self, verb: str, name: str, exc: GateRefused) -> None:
        """The launch gate's reasons; on yes, the same action with ``force`` (UI thread)."""
        self.app.post_message(WorkerError(name, str(exc).splitlines()[0]))
        service = self.service

        def done(ok: bool | None) -> None:
            if not ok:
                return
            if verb == "restart":
                self.call(verb, name, lambda: service.restart(name, force=True))
            else:
                self.call(verb, name, lambda: service.launch(name, force=True))

        self.app.push_screen(ConfirmScreen(gate_text(verb, name, exc), yes=f"{verb.capitalize()} anyway"), done)

    def retune_diff(self, name: str, changes: Mapping[str, str]) -> None:
        """The profile diff of a retune, computed in a thread; :meth:`confirm_retune` asks next."""

        def run() -> None:
            try:
                diff = self.service.retune_diff(name, changes)
            except Exception as exc:
                self.app.post_message(ControlDone(f"retune {name}: {one_line(exc)}", error=True, worker=name))
                return
            self.app.post_message(RetuneDiffReady(name, changes, diff))

        self.app.run_worker(run, thread=True, group="control", exit_on_error=False, description="retune diff")

    def confirm_retune(self, name: str, changes: Mapping[str, str], diff: str) -> None:
        def done(ok: bool | None) -> None:
            if ok:
                self.call("retune", name, lambda: self.service.retune(name, changes))

        self.app.push_screen(ConfirmScreen(f"Retune {name} and restart it?\n\n{diff}", yes="Retune"), done)

    # -- the controls ------------------------------------------------------------------------------------------------
    def launch(self, name: str) -> None:
        self.call("launch", name, lambda: self.service.launch(name))

    def _confirmed(self, verb: str, question: str, fn: Callable[[str], Any], name: str) -> None:
        def done(ok: bool | None) -> None:
            if ok:
                self.call(verb, name, lambda: fn(name))

        self.app.push_screen(ConfirmScreen(question.format(name=name), yes=verb.capitalize()), done)

    def restart(self, name: str) -> None:
        question = "Restart worker {name}? Its requests in flight are lost."
        self._confirmed("restart", question, self.service.restart, name)

    def stop(self, name: str) -> None:
        question = "Stop worker {name}? Every process of its group is terminated."
        self._confirmed("stop", question, self.service.stop, name)

    def adopt(self, name: str) -> None:
        question = (
            "Adopt {name}? A profile from its command line and environment (secrets left out) is added to the "
            "profile file; the server keeps running until you stop it."
        )
        self._confirmed("adopt", question, self.service.adopt, name)

    def retune(self, name: str, changes: Mapping[str, str] | None = None) -> None:
        """With ``changes``: straight to their diff and its confirmation; without, the retune dialog first."""
        if changes:
            self.retune_diff(name, changes)
            return

        def done(typed: dict[str, str] | None) -> None:
            if typed:
                self.retune_diff(name, typed)

        self.app.push_screen(RetuneScreen(name, self._retune_start(name)), done)

    def _retune_start(self, name: str) -> tuple[str, ...]:
        """The worker's current flags and env (secrets masked) for the dialog; none for a worker without a profile
        (a discovered server) or a node that keeps none."""
        try:
            return tuple(self.service.profile_words(name))
        except Exception:  # a discovered server has no profile
            return ()

    def sleep(self, worker: WorkerStatus) -> None:
        """Wake a sleeping worker at once; put an awake one to sleep (level 1) after a confirmation."""
        name = worker.name
        service = self.service
        if worker.source != "amdtop":
            self.app.notify(f"{name}: sleep/wake works on amdtop's own workers only", severity="warning")
            return
        if worker.state is WorkerState.ASLEEP:
            self.call("wake", name, lambda: service.sleep(name, wake=True))
            return
        question = (
            f"Put worker {name} to sleep (level 1)?\nIts weights move to host memory and its KV cache is dropped; "
            "requests wait until it wakes (z again).\nNeeds VLLM_SERVER_DEV_MODE=1 on the server."
        )
        self._confirmed("sleep", question, lambda n: service.sleep(n, level=1), name)

    def ramp(self, worker: WorkerStatus) -> None:
        """The ramp screen of ``worker`` (the node runs the ramp; a ramp it runs or ran is shown, not redone)."""
        name = worker.name
        if not worker.url:
            self.app.notify(f"{name} has no URL to ramp against", severity="warning")
            return
        try:
            check_base_url(worker.url)  # a URL from a record or a process's environment: never trusted as given
        except ValueError as exc:
            self.app.notify(f"{name}: cannot ramp: {exc}", severity="warning")
            return
        service = self.service

        def apply(n: int) -> None:
            self.call("retune", name, lambda: service.retune(name, {"max-num-seqs": str(n)}))

        def apply_changes(changes: dict[str, str]) -> None:
            self.call("retune", name, lambda: service.retune(name, changes))

        # The node runs the ramp (in-process or in the serve; it outlives this screen and, attached, this viewer) and
        # sends the worker's API key itself. The screen loads when first opened: its chart pulls in textual-plotext
        # and plotext (~1.6 MiB RSS) that a dashboard never needs until a ramp is asked for.
        from tui.screens.ramp import RampScreen
        from tui.service_ramp import ServiceRamp

        screen = RampScreen(
            worker.url, None, worker=name, state_dir=self.state_dir, apply=apply, apply_changes=apply_changes,
            runner=ServiceRamp(service, name, tuple(worker.gpus) or None),
        )  # fmt: skip
        self.app.push_screen(screen)

    def stacks(self, worker: WorkerStatus) -> None:
        """The Python stacks of the worker's ranks, in a modal (the node dumps them)."""
        from tui.screens.stacks import StacksScreen

        self.app.push_screen(StacksScreen(worker, self.service.stacks))

    def audit_fix(self, finding: Finding) -> None:
        """The retune diff of ``finding``'s fix, a confirmation, then the node applies its newest audit's fix by id
        (in-process or in the serve, refusing the same way)."""
        worker = finding.worker
        if worker is None:
            return
        changes = dict(finding.fix.changes)

        def run() -> None:
            try:
                diff = self.service.retune_diff(worker, changes)
            except Exception as exc:
                self.app.call_from_thread(
                    self.app.notify, f"fix {finding.fix_id}: {str(exc).splitlines()[0]}", severity="error"
                )
                return
            self.app.call_from_thread(self._confirm_fix, finding, worker, diff)

        self.app.run_worker(run, thread=True, group="control", exit_on_error=False, description="audit fix diff")

    def _confirm_fix(self, finding: Finding, worker: str, diff: str) -> None:
        def done(ok: bool | None) -> None:
            if ok:
                self.call("retune", worker, lambda: self.service.audit_fix(finding.fix_id))

        question = f"Apply {finding.fix_id} to {worker} and restart it?\n\n{diff}"
        self.app.push_screen(ConfirmScreen(question, yes="Apply"), done)

    def signal(self, row: ProcessRow | None) -> None:
        """``k`` on a process row: refuse (saying why) or ask, naming pid, user and command, then send. amdtop's own
        worker stops as a whole, through the supervisor."""
        if row is None:
            self.app.notify("that process is no longer on a GPU", severity="warning")
            return
        plan = plan_signal(row, readonly=self.readonly, euid=os.geteuid(), termed=frozenset(self.termed))
        if isinstance(plan, Refusal):
            if plan.worker is not None and not self.readonly:
                self.app.notify(plan.reason, timeout=4)
                self.stop(plan.worker)
            else:
                self.app.notify(plan.reason, severity="warning", timeout=6)
            return

        def done(ok: bool | None) -> None:
            if ok:
                # The node sends it (in-process, or the serve on its host) and refuses the same way it plans here.
                self._send(row.pid, row.started_at, plan.signum == signal.SIGKILL)

        self.app.push_screen(ConfirmScreen(plan.question, yes=f"Send {plan.name}"), done)

    def _send(self, pid: int, started_at: float | None, kill: bool) -> None:
        app = self.app

        def call() -> None:
            try:
                text = self.service.signal_process(pid, kill=kill)
            except Exception as exc:
                app.call_from_thread(app.notify, str(exc).splitlines()[0], severity="error", timeout=8)
                return

            def sent() -> None:
                if not kill:
                    self.termed.add((pid, started_at))
                app.notify(text + ("" if kill else "; k again sends KILL if it stays"), timeout=6)

            app.call_from_thread(sent)

        app.run_worker(call, thread=True, group="control", exit_on_error=False, description="signal a GPU process")

    def probe(self, frame: NodeFrame | None) -> None:
        """Ask, naming the GPUs in use, then measure p2p and all-reduce bandwidth on every GPU in a thread."""
        if frame is None or not frame.snapshot.topology.gpus:
            self.app.notify("no GPUs to probe", severity="warning")
            return
        topology = frame.snapshot.topology
        gpus = [g.index for g in topology.gpus]
        running = {w.name: w for w in frame.workers if w.pid}
        busy = busy_gpus(frame.snapshot, running, gpus, own_pid=os.getpid())
        groups = {name: tuple(w.gpus) for name, w in running.items() if w.gpus}
        warning = f"\n\nGPUs in use: {', '.join(busy)}: their workers will slow down." if busy else ""
        question = (
            f"Run the link probe on GPUs {','.join(map(str, gpus))}?\n"
            f"p2p copies between every pair and all-reduce up to 1 GiB per TP group load every GPU.{warning}"
        )

        def done(ok: bool | None) -> None:
            if ok:
                self.app.notify("link probe running…", timeout=4)
                self.app.run_worker(
                    lambda: self._probe(topology, gpus, groups), thread=True, group="probe", exclusive=True,
                    exit_on_error=False, description="link probe",
                )  # fmt: skip

        self.app.push_screen(ConfirmScreen(question, yes="Probe"), done)

    def _probe(self, topology: Topology, gpus: Sequence[int], groups: Mapping[str, Sequence[int]]) -> None:
        try:
            from amdtop.probe.runner import run_probe
            from amdtop.probe.torch_runner import TorchDist

            results = run_probe(TorchDist(), topology, gpus, PROBE_SIZES, workers=groups)
            save_results(self.state_dir, results)
            self.service.request_state_files()  # the node reads them (in-process or the serve, one state dir)
        except Exception as exc:  # torch missing, CUDA/ROCm errors: one line, the dashboard goes on
            text = str(exc) if str(exc).startswith("probe") else f"probe: {exc}"
            self.app.post_message(ControlDone(text, error=True))
            return
        best = max((c.gbps for c in results.copies), default=0.0)
        self.app.post_message(
            ControlDone(f"probe done: {len(results.copies)} copies, best pair {best:.0f} GB/s; m shows GB/s")
        )
        self.app.post_message(ProbeDone())


def one_line(exc: BaseException) -> str:
    """The first line of an exception's text (a traceback or a tool's usage text never reaches a row)."""
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]
