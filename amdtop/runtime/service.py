"""The node service in-process: what :func:`amdtop.runtime.open` returns, over the node it opened (its private
part: the runtime, the supervisor's owner, the monitors) and the node's ramps.

The dashboard and every headless command hold one directly; ``amdtop serve`` holds one and executes every viewer's
request on it by name, so a refusal (read-only, no profiles, the launch gate, a wrong name) is the same line wherever
it is asked from. Read-only is checked here only, once for every op the protocol marks as control
(:func:`_read_only_checked`): a read-only viewer's requests run on :meth:`LocalService.read_only` of the serve's.
"""

from __future__ import annotations

import asyncio
import functools
import os
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from amdtop.errors import AmdtopError, InputError
from amdtop.gpuprocs.signals import Refusal, plan_signal, send_signal
from amdtop.hub import Hub
from amdtop.model import Topology, WorkerStatus
from amdtop.pipeline.frame import NodeFrame
from amdtop.runtime.autostart import DemoAutostart, FailureSink
from amdtop.runtime.loop import NodeRuntime
from amdtop.runtime.node import Node
from amdtop.runtime.ramps import NodeRamps
from amdtop.service.api import CONTROL_OPS, READ_ONLY, ErrorSubscriber, FrameSubscriber, RampDoc, RampSubscriber

if TYPE_CHECKING:
    from amdtop.probe.model import ProbeResults
    from amdtop.supervisor.owner import SupervisorOwner
    from amdtop.supervisor.stopper import StopReport

T = TypeVar("T")
C = TypeVar("C", bound=type)


def _read_only_checked(cls: C) -> C:
    """Wrap every op the protocol marks as control (:data:`~amdtop.service.api.CONTROL_OPS`) in the one read-only
    check: a new control op is refused to a read-only service without anyone remembering to."""
    for op in CONTROL_OPS:
        method = getattr(cls, op)

        def checked(self: LocalService, *args: Any, _op: str = op, _method: Any = method, **kwargs: Any) -> Any:
            if self.readonly:
                raise InputError(f"{_op}: {READ_ONLY}")  # a flag that forbids it: bad input, exit 2
            return _method(self, *args, **kwargs)

        setattr(cls, op, functools.wraps(method)(checked))
    return cls


@_read_only_checked
class LocalService:
    """:class:`~amdtop.service.api.NodeService` over the node :func:`amdtop.runtime.open` opened (its private part)."""

    def __init__(self, node: Node, *, readonly: bool = False, ramps: NodeRamps | None = None) -> None:
        self._node = node
        self.readonly = readonly
        self._ramp_subs: Hub[RampSubscriber] = Hub("ramp")
        self._owner = ramps is None
        """This service opened the node (and ends it, and its ramps); a :meth:`read_only` view of it does not."""
        self._own_ramps = self._owner
        self.node_ramps = ramps or NodeRamps(node.state_dir, node.runtime.latest, self._publish_ramp)

    def read_only(self) -> LocalService:
        """The same node, its control refused (a read-only viewer of the serve): it shares the ramps and the frames;
        closing it closes nothing."""
        view = LocalService(self._node, readonly=True, ramps=self.node_ramps)
        view._ramp_subs = self._ramp_subs
        return view

    # -- the opened node --------------------------------------------------------------------------------------------
    @property
    def runtime(self) -> NodeRuntime:
        """The tick loop (start it, tick it, subscribe to it): the serve, ``export`` and ``snapshot --window`` run it."""
        return self._node.runtime

    @property
    def polls(self) -> int:
        """Ticks tried so far (the exporter's ``amdtop_exporter_polls``: the node's polls, never a scrape's)."""
        return self._node.runtime.polls

    @property
    def last_duration_s(self) -> float:
        return self._node.runtime.last_duration_s

    @property
    def notes(self) -> list[str]:
        """Banner lines: why the node is simulated, why workers are left out, where the demo is not pinned."""
        return self._node.notes

    @property
    def demo(self) -> bool:
        """The simulated node stands in (``--demo``, or no GPU found for the dashboard)."""
        return self._node.demo

    @property
    def backend_name(self) -> str:
        return self._node.backend.name

    def topology(self) -> Topology:
        """The node's topology (the backend's; no tick)."""
        return self._node.backend.topology()

    def supervisor_report(self) -> tuple[list[str], Exception | None]:
        """What the supervisor's last status pass ignored (one line each) and the profile file's error, for a command
        that supervises in-process (``amdtop workers``) to say, as the dashboard's banner says the error."""
        sup = self._node.supervisor
        return ([], None) if sup is None else (list(sup.notes), sup.config_error)

    def start_demo(self, on_failure: FailureSink | None = None) -> DemoAutostart | None:
        """Launch the stopped demo workers in the background (see :meth:`amdtop.runtime.node.Node.start_demo`)."""
        return self._node.start_demo(on_failure)

    def stop_demo(self) -> None:
        self._node.stop_demo()

    # -- frames -----------------------------------------------------------------------------------------------------
    def subscribe(self, on_frame: FrameSubscriber, on_error: ErrorSubscriber | None = None) -> Callable[[], None]:
        return self._node.runtime.subscribe(on_frame, on_error)

    def latest(self) -> NodeFrame:
        return self._node.runtime.latest()

    def deliver_in(self, loop: asyncio.AbstractEventLoop) -> None:
        """Frames are made and published on the poll thread: nothing to move."""

    def wake(self) -> None:
        self._node.runtime.wake()

    def request_state_files(self) -> None:
        self._node.pipeline.request_state_files()
        self._node.runtime.wake()

    # -- control ----------------------------------------------------------------------------------------------------
    def _control(self, op: str) -> SupervisorOwner:
        """The supervisor's owner for ``op``, or the one-line refusal every view shows (read-only is refused before
        any op runs: :func:`_read_only_checked`)."""
        control = self._node.control
        if control is None:
            raise AmdtopError(f"{op}: refused: {self._no_control_reason()}")
        return control

    def _no_control_reason(self) -> str:
        """Why this node has no supervisor, as the operator can act on it."""
        for note in self._node.notes:
            if note.startswith("supervisor: "):
                return note  # the profile file's own error (it did not load at all)
        return "no worker profiles on this node (no profile file); write one and restart"

    def _changed(self, value: T) -> T:
        self._node.runtime.wake()  # every view sees the change on the next frame
        return value

    def status(self) -> list[WorkerStatus]:
        control = self._node.control
        return [] if control is None else list(control.status())

    def launch(self, name: str, force: bool = False) -> WorkerStatus:
        return self._changed(self._control("launch").launch(name, force=force))

    def restart(self, name: str, grace: float | None = None, force: bool = False) -> WorkerStatus:
        return self._changed(self._control("restart").restart(name, grace=grace, force=force))

    def stop(self, name: str, grace: float | None = None) -> StopReport | str:
        frame = self._node.runtime.frame
        found = frame.worker(name) if frame is not None else None
        if found is not None and found.source == "discovered":
            # A server amdtop did not start: TERM to its API server (after the same confirmation), nothing swept.
            from amdtop.pipeline.found import stop_found_server

            return self._changed(stop_found_server(found))
        return self._changed(self._control("stop").stop(name, grace=grace))

    def retune_diff(self, name: str, changes: Mapping[str, str]) -> str:
        return str(self._control("retune_diff").retune_diff(name, dict(changes)))

    def retune(
        self, name: str, changes: Mapping[str, str], grace: float | None = None, force: bool = False
    ) -> WorkerStatus:
        return self._changed(self._control("retune").retune(name, dict(changes), grace=grace, force=force))

    def sleep(self, name: str, wake: bool = False, level: int = 1) -> str:
        return str(self._changed(self._control("sleep").sleep(name, wake=wake, level=level)))

    def adopt(self, name: str, profile_name: str | None = None) -> str:
        from amdtop.analysis import discover_vllm
        from amdtop.procinfo import read_cmdline, read_environ
        from amdtop.supervisor.adopt import adopt_profile

        control = self._control("adopt")
        frame = self._node.runtime.frame
        worker = frame.worker(name) if frame is not None else None
        if worker is None:  # a node that does not discover (a CLI's own service): look for it now
            worker = next((w for w in discover_vllm() if w.name == name), None)
        if worker is None or worker.source != "discovered" or not worker.pid:
            raise InputError(f"adopt: {name} is no running server amdtop did not start (vllm-PID, sglang-PID)")
        gpus = tuple(g.index for g in self._node.backend.topology().gpus)
        adopted = adopt_profile(
            worker, read_cmdline(worker.pid), read_environ(worker.pid), profile_name=profile_name, node_gpus=gpus
        )
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
        frame = self._node.runtime.frame
        worker = frame.worker(name) if frame is not None else None
        if worker is None:
            worker = next((w for w in self.status() if w.name == name), None)
        if worker is None:
            raise InputError(f"stacks: no worker {name!r}")
        if not worker_targets(worker):
            raise AmdtopError(f"stacks: {name} runs no process")
        return render_stacks(name, dump_stacks(worker_targets(worker)))

    def signal_process(self, pid: int, kill: bool = False) -> str:
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

    def probe_links(
        self, gpus: tuple[int, ...], sizes: tuple[int, ...], iters: int = 10, copy_size: int | None = None
    ) -> ProbeResults:
        from amdtop.probe.cache import save_results
        from amdtop.probe.runner import run_probe
        from amdtop.probe.torch_runner import TorchDist

        frame = self.latest()
        if not sizes or iters < 1:
            raise InputError("probe: give at least one size and one iteration")
        known = {g.index for g in frame.snapshot.topology.gpus}
        if not gpus or not set(gpus) <= known:
            raise InputError(f"probe: GPUs {list(gpus)} are not this node's ({sorted(known)})")
        groups = {w.name: tuple(w.gpus) for w in frame.workers if w.pid and w.gpus}
        try:
            results = run_probe(
                TorchDist(), frame.snapshot.topology, gpus, sizes, workers=groups, iters=iters, copy_size=copy_size
            )
        except InputError:
            raise
        except AmdtopError as exc:  # no PyTorch, no GPU of its own: the line every view shows, in-process or not
            raise AmdtopError(str(exc)) from None
        save_results(self._node.state_dir, results)
        self.request_state_files()  # every view shows the new rates from the next frame on
        return results

    # -- ramps ------------------------------------------------------------------------------------------------------
    def ramp_start(self, worker: str, url: str, gpus: tuple[int, ...] | None, settings: dict[str, Any]) -> str:
        settings = dict(settings)
        control = self._node.control
        if not settings.get("api_key") and control is not None:
            # The key stays here: a viewer never reads it, the node's ramp sends it (else 401 from the worker).
            try:
                settings["api_key"] = control.api_key(worker)
            except Exception:
                settings["api_key"] = None  # a discovered server has no profile, hence no key of ours
        frame = self._node.runtime.frame
        found = frame.worker(worker) if frame is not None else None
        groups = [g.gpus for g in found.tp_groups()] if found is not None else None
        try:
            return self.node_ramps.start(worker, url, gpus, settings, groups)
        except (ValueError, TypeError) as exc:  # a refused URL or setting: bad input, the same line over the wire
            raise InputError(f"ramp {worker}: {exc}") from None

    def ramp_abort(self, worker: str) -> str:
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
        control = self._node.control
        return None if control is None else control.api_key(name)

    def close(self) -> None:
        """Leave the node (the protocol's ``close``: a view that leaves aborts the ramps it may have started; the node
        stays open for whoever opened it, who ends it with :meth:`shutdown`). A :meth:`read_only` view aborts nothing."""
        if self._own_ramps:
            self.node_ramps.abort_all()

    def shutdown(self) -> None:
        """Close the node :func:`amdtop.runtime.open` opened: the ramps, the tick loop, the demo's workers, the
        monitors and the backend (real workers keep running). Once; a :meth:`read_only` view shuts nothing down."""
        if self._owner:
            self._owner = False  # once: the serve and its command may both end it
            self.close()
            self._node.close()
