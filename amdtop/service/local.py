"""The node service in-process: the opened node's runtime, its supervisor's owner and its ramps.

The dashboard holds one directly; ``amdtop serve`` holds one and executes every viewer's request on it by name, so
a refusal (read-only, no profiles, the launch gate, a wrong name) is the same line wherever it is asked from.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from amdtop.errors import AmdtopError, InputError
from amdtop.gpuprocs.signals import Refusal, plan_signal, send_signal
from amdtop.hub import Hub
from amdtop.model import WorkerStatus
from amdtop.pipeline.frame import NodeFrame
from amdtop.runtime.node import Node
from amdtop.serve.ramps import ServeRamps
from amdtop.service.api import CONTROL_OPS, READ_ONLY, ErrorSubscriber, FrameSubscriber, RampDoc, RampSubscriber

if TYPE_CHECKING:
    from amdtop.supervisor.owner import SupervisorOwner

T = TypeVar("T")


class LocalService:
    """:class:`~amdtop.service.api.NodeService` over an opened :class:`~amdtop.runtime.node.Node`."""

    def __init__(self, node: Node, state_dir: Path, *, readonly: bool = False) -> None:
        self.node = node
        self.readonly = readonly
        self._ramp_subs: Hub[RampSubscriber] = Hub("ramp")
        self.node_ramps = ServeRamps(Path(state_dir), node.runtime.latest, self._publish_ramp)

    # -- frames -----------------------------------------------------------------------------------------------------
    def subscribe(self, on_frame: FrameSubscriber, on_error: ErrorSubscriber | None = None) -> Callable[[], None]:
        return self.node.runtime.subscribe(on_frame, on_error)

    def latest(self) -> NodeFrame:
        return self.node.runtime.latest()

    def deliver_in(self, loop: asyncio.AbstractEventLoop) -> None:
        """Frames are made and published on the poll thread: nothing to move."""

    def wake(self) -> None:
        self.node.runtime.wake()

    def request_state_files(self) -> None:
        self.node.pipeline.request_state_files()
        self.node.runtime.wake()

    # -- control ----------------------------------------------------------------------------------------------------
    def _control(self, op: str) -> SupervisorOwner:
        """The supervisor's owner for ``op``, or the one-line refusal every view shows."""
        if op in CONTROL_OPS and self.readonly:
            raise AmdtopError(f"{op}: {READ_ONLY}")
        control = self.node.control
        if control is None:
            raise AmdtopError(f"{op}: refused: {self._no_control_reason()}")
        return control

    def _no_control_reason(self) -> str:
        """Why this node has no supervisor, as the operator can act on it."""
        for note in self.node.notes:
            if note.startswith("supervisor: "):
                return note  # the profile file's own error (it did not load at all)
        return "no worker profiles on this node (no profile file); write one and restart"

    def _changed(self, value: T) -> T:
        self.node.runtime.wake()  # every view sees the change on the next frame
        return value

    def status(self) -> list[WorkerStatus]:
        control = self.node.control
        return [] if control is None else list(control.status())

    def launch(self, name: str, force: bool = False) -> WorkerStatus:
        return self._changed(self._control("launch").launch(name, force=force))

    def restart(self, name: str, grace: float | None = None, force: bool = False) -> WorkerStatus:
        return self._changed(self._control("restart").restart(name, grace=grace, force=force))

    def stop(self, name: str, grace: float | None = None) -> Any:
        frame = self.node.runtime.frame
        found = frame.worker(name) if frame is not None else None
        if found is not None and found.source == "discovered":
            # A server amdtop did not start: TERM to its API server (after the same confirmation), nothing swept.
            if self.readonly:
                raise AmdtopError(f"stop: {READ_ONLY}")
            from amdtop.pipeline.found import stop_found_server

            return self._changed(stop_found_server(found))
        return self._changed(self._control("stop").stop(name, grace=grace))

    def retune_diff(self, name: str, changes: Mapping[str, str]) -> str:
        return str(self._control("retune_diff").retune_diff(name, dict(changes)))

    def retune(self, name: str, changes: Mapping[str, str]) -> WorkerStatus:
        return self._changed(self._control("retune").retune(name, dict(changes)))

    def sleep(self, name: str, wake: bool = False, level: int = 1) -> str:
        return str(self._changed(self._control("sleep").sleep(name, wake=wake, level=level)))

    def adopt(self, name: str) -> str:
        from amdtop.procinfo import read_cmdline, read_environ
        from amdtop.supervisor.adopt import adopt_profile

        control = self._control("adopt")
        frame = self.node.runtime.frame
        worker = frame.worker(name) if frame is not None else None
        if worker is None or worker.source != "discovered" or not worker.pid:
            raise InputError(f"adopt: {name} is no running server amdtop did not start (vllm-PID, sglang-PID)")
        gpus = tuple(g.index for g in frame.snapshot.topology.gpus) if frame is not None else None
        adopted = adopt_profile(worker, read_cmdline(worker.pid), read_environ(worker.pid), node_gpus=gpus)
        control.adopt(adopted)
        left = f"; left out: {', '.join(line.split(':')[0] for line in adopted.left_out)}" if adopted.left_out else ""
        return str(self._changed(
            f"adopted {name}: profile {adopted.name} written; stop it (kill -TERM {worker.pid}) and launch "
            f"{adopted.name} for amdtop to run it{left}"
        ))  # fmt: skip

    def stacks(self, name: str) -> str:
        from amdtop.supervisor.stacks import dump_stacks, render_stacks, worker_targets

        # The newest frame's worker: its ranks as every view shows them (discovered servers included), else the
        # supervisor's own status (before the first frame).
        frame = self.node.runtime.frame
        worker = frame.worker(name) if frame is not None else None
        if worker is None:
            worker = next((w for w in self.status() if w.name == name), None)
        if worker is None:
            raise InputError(f"stacks: no worker {name!r}")
        if not worker_targets(worker):
            raise AmdtopError(f"stacks: {name} runs no process")
        return render_stacks(name, dump_stacks(worker_targets(worker)))

    def signal_process(self, pid: int, kill: bool = False) -> str:
        if self.readonly:
            raise AmdtopError(f"signal_process: {READ_ONLY}")
        row = next((r for r in self.latest().processes if r.pid == pid), None)
        if row is None:
            raise InputError(f"signal: pid {pid} is not on a GPU now")
        termed = frozenset({(row.pid, row.started_at)}) if kill else frozenset()
        plan = plan_signal(row, readonly=self.readonly, euid=os.geteuid(), termed=termed)
        if isinstance(plan, Refusal):
            raise AmdtopError(plan.reason)
        try:
            return str(self._changed(send_signal(plan)))
        except OSError as exc:
            raise AmdtopError(f"pid {pid}: {exc.strerror or exc}") from None

    def audit_fix(self, fix_id: str) -> WorkerStatus:
        control = self._control("audit_fix")
        report = self.latest().audit
        finding = None if report is None else report.find(fix_id)
        if finding is None:
            raise InputError(f"audit fix: no finding {fix_id!r} now")
        if finding.worker is None or finding.fix.kind not in ("retune", "profile_env") or not finding.fix.changes:
            raise InputError(f"audit fix {finding.fix_id}: not a retune of a worker; apply it by hand")
        return self._changed(control.retune(finding.worker, dict(finding.fix.changes)))

    # -- ramps ------------------------------------------------------------------------------------------------------
    def ramp_start(self, worker: str, url: str, gpus: tuple[int, ...] | None, settings: dict[str, Any]) -> str:
        if self.readonly:
            raise AmdtopError(f"ramp_start: {READ_ONLY}")
        settings = dict(settings)
        control = self.node.control
        if not settings.get("api_key") and control is not None:
            # The key stays here: a viewer never reads it, the node's ramp sends it (else 401 from the worker).
            try:
                settings["api_key"] = control.api_key(worker)
            except Exception:
                settings["api_key"] = None  # a discovered server has no profile, hence no key of ours
        frame = self.node.runtime.frame
        found = frame.worker(worker) if frame is not None else None
        groups = [g.gpus for g in found.tp_groups()] if found is not None else None
        try:
            return self.node_ramps.start(worker, url, gpus, settings, groups)
        except (ValueError, TypeError) as exc:  # a refused URL or setting: bad input, the same line over the wire
            raise InputError(f"ramp {worker}: {exc}") from None

    def ramp_abort(self, worker: str) -> str:
        if self.readonly:
            raise AmdtopError(f"ramp_abort: {READ_ONLY}")
        return self.node_ramps.abort(worker)

    def ramps(self) -> list[RampDoc]:
        return self.node_ramps.documents()

    def on_ramp(self, callback: RampSubscriber) -> None:
        self._ramp_subs.add(callback)

    def _publish_ramp(self, worker: str, doc: dict[str, Any], status: str) -> None:
        self._ramp_subs.publish(worker, doc, status, self.node_ramps.running(worker))

    # -- reads ------------------------------------------------------------------------------------------------------
    def profile_words(self, name: str) -> tuple[str, ...]:
        from amdtop.supervisor.retune import retune_words

        return retune_words(self._control("profile_words").profile(name))

    def api_key(self, name: str) -> str | None:
        """The key ``name``'s clients send: the node's own ramps use it; no view and no wire op reads it."""
        control = self.node.control
        return None if control is None else control.api_key(name)

    def close(self) -> None:
        """Abort the ramps; the node is closed by whoever opened it."""
        self.node_ramps.abort_all()
