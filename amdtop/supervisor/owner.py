"""One thread owns the supervisor: launch, stop, restart, retune and status are commands queued to it.

The :class:`Supervisor` keeps plain mutable state (its children, the prober's meters, the profile document, the
full-scan clock); its state files are locked, its memory is not. Rather than lock every attribute, one thread touches
it: every other thread (the node runtime's tick, the dashboard's control actions, the demo's autostart) queues a
command and gets a :class:`~concurrent.futures.Future` back. The blocking methods of :class:`SupervisorOwner` (the
:class:`~amdtop.control.WorkerControl` protocol) wait for that future.

Status for the frame does not wait behind a long stop: :meth:`SupervisorOwner.status` asks for a fresh pass and
waits for it only while the owner is free; while a command runs it answers the last pass, with the workers that
command acts on shown as ``stopping`` or ``starting``.
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from dataclasses import replace
from typing import TypeVar

from amdtop.control import DemoLoad
from amdtop.model import WorkerState, WorkerStatus
from amdtop.supervisor.adopt import Adopted
from amdtop.supervisor.core import Supervisor
from amdtop.supervisor.profiles import Profile
from amdtop.supervisor.stopper import StopReport

T = TypeVar("T")

STATUS_WAIT_S = 30.0
"""How long a status read waits for a pass while nothing else runs (a pass is procfs reads and short HTTP calls)."""

# What a worker shows while a command on it runs (the last status pass is older than the command).
_IN_FLIGHT = {
    "launch": WorkerState.STARTING,
    "stop": WorkerState.STOPPING,
    "restart": WorkerState.STOPPING,
    "retune": WorkerState.STOPPING,
}


class _Command:
    __slots__ = ("fn", "future", "verb", "worker")

    def __init__(self, fn: Callable[[Supervisor], object], verb: str, worker: str | None) -> None:
        self.fn = fn
        self.verb = verb
        self.worker = worker
        self.future: Future[object] = Future()


class SupervisorOwner:
    """The owner thread of one :class:`Supervisor`; implements :class:`~amdtop.control.WorkerControl`."""

    def __init__(self, supervisor: Supervisor, *, status_wait_s: float = STATUS_WAIT_S) -> None:
        """Start the owner thread (a daemon: the workers outlive amdtop, and so may a hung HTTP probe)."""
        self.supervisor = supervisor
        self.status_wait_s = status_wait_s
        self._queue: queue.SimpleQueue[_Command | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._status: tuple[WorkerStatus, ...] | None = None
        self._pending_status: Future[list[WorkerStatus]] | None = None
        self._running: _Command | None = None
        self._closed = False
        self._thread = threading.Thread(target=self._serve, name="amdtop-supervisor", daemon=True)
        self._thread.start()

    # -- the owner thread -------------------------------------------------------------------------------------------
    def _serve(self) -> None:
        while True:
            cmd = self._queue.get()
            if cmd is None:
                return
            with self._lock:
                self._running = cmd
            if cmd.future.set_running_or_notify_cancel():
                try:
                    result = cmd.fn(self.supervisor)
                except BaseException as exc:  # the caller gets the failure; the owner goes on with the next command
                    cmd.future.set_exception(exc)
                else:
                    cmd.future.set_result(result)
            with self._lock:
                self._running = None

    def submit(self, fn: Callable[[Supervisor], T], *, verb: str = "call", worker: str | None = None) -> Future[T]:
        """Queue ``fn(supervisor)`` to the owner thread; its result (or exception) comes back in the future."""
        cmd = _Command(fn, verb, worker)
        with self._lock:
            if self._closed:
                raise RuntimeError("supervisor: closed")
            self._queue.put(cmd)
        return cmd.future  # type: ignore[return-value]

    # -- commands, as futures ---------------------------------------------------------------------------------------
    def launch_async(self, name: str, force: bool = False) -> Future[WorkerStatus]:
        """Queue a launch of ``name`` (``force``: past the launch gate's refusal, recorded)."""
        return self.submit(lambda s: s.launch(name, force), verb="launch", worker=name)

    def stop_async(self, name: str, grace: float | None = None) -> Future[StopReport]:
        """Queue a stop of ``name``."""
        return self.submit(lambda s: s.stop(name, grace), verb="stop", worker=name)

    def restart_async(self, name: str, grace: float | None = None, force: bool = False) -> Future[WorkerStatus]:
        """Queue a restart of ``name``."""
        return self.submit(lambda s: s.restart(name, grace, force), verb="restart", worker=name)

    def retune_async(
        self, name: str, changes: Mapping[str, str], grace: float | None = None, force: bool = False
    ) -> Future[WorkerStatus]:
        """Queue a retune of ``name`` (profile written back, worker restarted if it runs)."""
        frozen = dict(changes)
        return self.submit(lambda s: s.retune(name, frozen, grace, force), verb="retune", worker=name)

    def refresh(self) -> Future[list[WorkerStatus]]:
        """Queue one status pass (coalesced: while one is queued, asking again returns the same future)."""
        with self._lock:
            pending = self._pending_status
            if pending is not None and not pending.done():
                return pending
            if self._closed:
                raise RuntimeError("supervisor: closed")
            cmd = _Command(self._status_pass, "status", None)
            self._queue.put(cmd)
            self._pending_status = cmd.future  # type: ignore[assignment]
        return cmd.future  # type: ignore[return-value]

    def _status_pass(self, sup: Supervisor) -> list[WorkerStatus]:
        rows = sup.status()
        with self._lock:
            self._status = tuple(rows)
        return rows

    # -- WorkerControl (blocking) -----------------------------------------------------------------------------------
    def status(self) -> list[WorkerStatus]:
        """A fresh status pass when the owner is free; while a command runs, the last pass with the commanded
        workers shown as starting/stopping (the frame must not wait behind a 30 s stop).

        Asked from the owner thread itself (the launch gate ticks the node while a launch runs there), the pass runs
        at once: queued, it would wait behind the very command that asked, for ``status_wait_s``, and then run after
        it as a stray pass."""
        if threading.current_thread() is self._thread:
            return self._status_pass(self.supervisor)
        fut = self.refresh()
        with self._lock:
            busy = self._running is not None and self._running.verb != "status"
            last = self._status
        if busy and last is not None:
            return self._in_flight(last)
        try:
            return fut.result(timeout=self.status_wait_s)
        except TimeoutError:
            if last is None:
                raise
            return self._in_flight(last)

    def _in_flight(self, rows: tuple[WorkerStatus, ...]) -> list[WorkerStatus]:
        with self._lock:
            cmd = self._running
        if cmd is None or cmd.worker is None or cmd.verb not in _IN_FLIGHT:
            return list(rows)
        state = _IN_FLIGHT[cmd.verb]
        return [replace(r, state=state, note=f"{cmd.verb} in progress") if r.name == cmd.worker else r for r in rows]

    def launch(self, name: str, force: bool = False) -> WorkerStatus:
        """Launch ``name`` and wait for the result."""
        return self.launch_async(name, force).result()

    def stop(self, name: str, grace: float | None = None) -> StopReport:
        """Stop ``name`` and wait for the report."""
        return self.stop_async(name, grace).result()

    def restart(self, name: str, grace: float | None = None, force: bool = False) -> WorkerStatus:
        """Restart ``name`` and wait for the result."""
        return self.restart_async(name, grace, force).result()

    def retune(
        self, name: str, changes: Mapping[str, str], grace: float | None = None, force: bool = False
    ) -> WorkerStatus:
        """Retune ``name`` and wait for the result."""
        return self.retune_async(name, changes, grace, force).result()

    def retune_diff(self, name: str, changes: Mapping[str, str]) -> str:
        """The diff of ``changes`` to ``name``'s profile (validated, nothing written)."""
        frozen = dict(changes)
        return self.submit(lambda s: s.retune_diff(name, frozen), verb="diff", worker=name).result()

    def sleep(self, name: str, *, wake: bool = False, level: int = 1) -> str:
        """vLLM sleep mode for ``name`` (or wake it), queued like every other command."""
        return self.submit(lambda s: s.sleep(name, wake=wake, level=level), verb="wake" if wake else "sleep",
                           worker=name).result()  # fmt: skip

    def adopt(self, adopted: Adopted) -> None:
        """Add the profile written for a found server to the profile file, queued like every other command."""
        self.submit(lambda s: s.adopt(adopted), verb="adopt", worker=adopted.name).result()

    def api_key(self, name: str) -> str | None:
        """The API key ``name``'s clients must send (read as :meth:`profile`: the profiles are swapped whole)."""
        return self.supervisor.api_key(name)

    def profile(self, name: str) -> Profile:
        """``name``'s current profile (InputError when unknown).

        Read here rather than queued: the profiles are an immutable list the owner swaps whole on a retune, and the
        retune dialog must not wait behind a running stop to open."""
        return self.supervisor.profile(name)

    def names(self) -> list[str]:
        """Profile names in file order (read as :meth:`profile`)."""
        return self.supervisor.names()

    def demo_load(self) -> DemoLoad | None:
        """The demo's load feed (built once; it reads the profiles the owner swaps whole on a retune)."""
        return self.supervisor.demo_load()

    def close(self) -> None:
        """Release the supervisor's HTTP client once the queued commands ran (workers keep running); returns at once,
        so quitting the dashboard does not wait behind a stop's grace.

        The owner keeps taking commands: the demo's autostart stops its workers after the dashboard has closed.
        """
        with contextlib.suppress(RuntimeError):
            self.submit(lambda s: s.close(), verb="close")

    def shutdown(self) -> None:
        """Close, wait for the queued commands, and end the owner thread; later commands raise RuntimeError."""
        self.close()
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._queue.put(None)
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout=60)
