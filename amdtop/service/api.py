"""The one declared interface of a node: frames, control, ramps and reads.

The wire is this interface: every method marked :func:`op` is a request of the same name on the serve's socket
(:data:`WIRE_OPS`), and the serve executes it by that name on its :class:`~amdtop.service.local.LocalService`; those
marked ``control=True`` change the node and are refused to a read-only viewer or service (:data:`CONTROL_OPS`). No
table of ops is kept by hand: both sets are read off this class.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any, Protocol, TypeVar

from amdtop.model import WorkerStatus
from amdtop.pipeline.frame import NodeFrame
from amdtop.probe.model import ProbeResults
from amdtop.supervisor.stopper import StopReport

F = TypeVar("F", bound=Callable[..., Any])

FrameSubscriber = Callable[[NodeFrame], None]
ErrorSubscriber = Callable[[str], None]
RampSubscriber = Callable[[str, dict[str, Any], str, bool], None]
"""``(worker, document, status, running)`` of a ramp's update."""
RampDoc = tuple[str, dict[str, Any], str, bool]
READ_ONLY = "refused: read-only (--readonly); restart without --readonly to control workers"
"""The refusal of a control request on a read-only node or by a read-only viewer (the same line both ways)."""


def op(*, control: bool = False) -> Callable[[F], F]:
    """Mark a :class:`NodeService` method as a wire request (``control``: it changes the node)."""

    def mark(fn: F) -> F:
        fn.__wire_op__ = "control" if control else "read"  # type: ignore[attr-defined]
        return fn

    return mark


class NodeService(Protocol):
    """One node: what every view gets, whichever implementation it holds (never probe which)."""

    readonly: bool
    """Control is refused (``--readonly``, a read-only viewer, or no worker profiles)."""

    # -- frames -----------------------------------------------------------------------------------------------------
    def subscribe(self, on_frame: FrameSubscriber, on_error: ErrorSubscriber | None = None) -> Callable[[], None]:
        """Every frame from now on (a subscriber's exception is reported on ``on_error``, never fatal to the
        stream); returns the unsubscribe call."""
        ...

    def latest(self) -> NodeFrame:
        """The newest frame (RuntimeError before the first)."""
        ...

    def deliver_in(self, loop: asyncio.AbstractEventLoop) -> None:
        """Call subscribers on ``loop``'s thread from now on where that costs less (call it on that thread, which
        runs the loop): a remote service then reads its socket in the loop, no thread of its own. The local one
        publishes from its poll thread, where each frame is made, and ignores this."""
        ...

    @op()
    def wake(self) -> None:
        """Poll now (a control action changed the workers)."""
        ...

    @op()
    def request_state_files(self) -> None:
        """Re-read the state dir's files on the next poll (the link probe wrote its results)."""
        ...

    # -- control ----------------------------------------------------------------------------------------------------
    @op()
    def status(self) -> list[WorkerStatus]:
        """Every worker's status."""
        ...

    @op(control=True)
    def launch(self, name: str, force: bool = False) -> WorkerStatus:
        """Launch ``name`` (the launch gate judges its GPUs first; ``force`` overrides it, recorded)."""
        ...

    @op(control=True)
    def restart(self, name: str, grace: float | None = None, force: bool = False) -> WorkerStatus:
        """Stop and launch ``name`` again (gated like a launch)."""
        ...

    @op(control=True)
    def stop(self, name: str, grace: float | None = None) -> StopReport | str:
        """Stop ``name`` (TERM, then KILL after ``grace`` seconds); its report has a ``message``. A server amdtop did
        not start gets TERM to its API server only, and the outcome is one line."""
        ...

    @op()
    def retune_diff(self, name: str, changes: Mapping[str, str]) -> str:
        """The profile diff ``changes`` would make (validated; nothing written)."""
        ...

    @op(control=True)
    def retune(
        self, name: str, changes: Mapping[str, str], grace: float | None = None, force: bool = False
    ) -> WorkerStatus:
        """Write ``changes`` to ``name``'s profile and restart it (``grace``, ``force``: as a restart takes them)."""
        ...

    @op(control=True)
    def sleep(self, name: str, wake: bool = False, level: int = 1) -> str:
        """vLLM sleep mode: put ``name`` to sleep, or wake it."""
        ...

    @op(control=True)
    def adopt(self, name: str, profile_name: str | None = None) -> str:
        """Write a profile (``profile_name``, default ENGINE-PORT) from found server ``name``'s argv and env (secrets
        left out) into the profile file, so that its next start is amdtop's; returns the one-line result."""
        ...

    @op()
    def stacks(self, name: str) -> str:
        """The Python stacks of ``name``'s ranks (py-spy), as text."""
        ...

    @op(control=True)
    def signal_process(self, pid: int, kill: bool = False) -> str:
        """TERM (``kill``: KILL) a GPU process of the newest frame that is no worker's (refusals are one line)."""
        ...

    @op(control=True)
    def audit_fix(self, fix_id: str) -> WorkerStatus:
        """Apply the newest audit's fix ``fix_id`` (a retune of its worker)."""
        ...

    @op(control=True)
    def probe_links(
        self, gpus: tuple[int, ...], sizes: tuple[int, ...], iters: int = 10, copy_size: int | None = None
    ) -> ProbeResults:
        """Run the link probe on ``gpus`` (copies between every pair, all-reduce per running worker's GPUs at each of
        ``sizes``), in the node's process: its results are cached in the state dir and every view shows them."""
        ...

    # -- ramps ------------------------------------------------------------------------------------------------------
    @op(control=True)
    def ramp_start(self, worker: str, url: str, gpus: tuple[int, ...] | None, settings: dict[str, Any]) -> str:
        """Start a load ramp against ``worker`` (the node fills in the worker's API key; a viewer never reads it)."""
        ...

    @op(control=True)
    def ramp_abort(self, worker: str) -> str:
        """Abort ``worker``'s ramp (partial results kept; InputError when none runs)."""
        ...

    @op()
    def ramps(self) -> list[RampDoc]:
        """Every ramp's newest document: ``(worker, doc, status, running)``."""
        ...

    def on_ramp(self, callback: RampSubscriber) -> None:
        """Call ``callback`` with every ramp update from now on."""
        ...

    # -- reads ------------------------------------------------------------------------------------------------------
    @op()
    def profile_words(self, name: str) -> tuple[str, ...]:
        """``name``'s retunable flags and env as ``KEY=VALUE`` words, secrets masked (the retune dialog's start)."""
        ...

    def api_key(self, name: str) -> str | None:
        """The key ``name``'s clients send, for a ramp this process runs itself; never a wire op: a remote service
        answers ``None`` (the serve's own ramps send the key; no viewer reads it)."""
        ...

    def close(self) -> None:
        """Leave the node (workers keep running)."""
        ...


def _ops(kind: str | None) -> frozenset[str]:
    return frozenset(
        name
        for name, fn in vars(NodeService).items()
        if getattr(fn, "__wire_op__", None) is not None and (kind is None or fn.__wire_op__ == kind)
    )


WIRE_OPS = _ops(None)
"""Every request the serve answers for the service, by method name."""
CONTROL_OPS = _ops("control")
"""The requests that change the node."""
