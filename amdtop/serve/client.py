"""The viewer's end: attach to a serve, receive its frames, send control requests.

:class:`RemoteService` is the :class:`~amdtop.service.api.NodeService` over the socket: the dashboard takes it exactly
as it takes the in-process :class:`~amdtop.runtime.service.LocalService` (it never asks which), and polls nothing
itself when attached.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import itertools
import os
import select
import socket
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from amdtop.audit.gate import GateRefused
from amdtop.errors import AmdtopError, InputError
from amdtop.hub import Hub
from amdtop.pipeline.frame import NodeFrame
from amdtop.serve import lock as serve_lock
from amdtop.serve import peer
from amdtop.serve.wire import (
    WIRE_VERSION,
    MessageBuffer,
    WireError,
    check_version,
    read_message,
    send_message,
    socket_path,
)
from amdtop.service.api import WIRE_OPS, ErrorSubscriber, FrameSubscriber, NodeService, RampSubscriber

READ_CHUNK = 256 << 10
"""Bytes one read of the socket takes (an idle delta frame is about 0.5 KiB, a whole one with history tens)."""
C = TypeVar("C", bound=type)
CALL_TIMEOUT_S = 600.0
"""A stop waits for a worker's grace period and a launch for its process: minutes at most."""


class ServeGone(AmdtopError):
    """The serve closed the connection (stopped, killed)."""


def _connect(sock: socket.socket, path: Path, timeout: float) -> None:
    """Connect within ``timeout``: a Unix socket whose backlog is full answers EAGAIN at once rather than waiting
    (a busy serve, or one out of descriptors, takes its pending viewers a little later); TimeoutError after it."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            sock.connect(str(path))
            return
        except BlockingIOError:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{path}: the serve's backlog stayed full") from None
            time.sleep(0.02)


class ServeClient:
    """One connection to a serve: its messages (frames, replies, ramp updates) are read and dispatched by a reader
    thread, or, with ``reader=False``, by whoever waits on them (:meth:`wait_first_frame`, :meth:`call`) and then
    the event loop :meth:`read_in` names.

    The dashboard reads in its own loop: a reader thread woke for every frame, took the GIL from the UI and handed
    the frame over through the loop's self-pipe, the largest part of what an attached viewer cost beyond the
    in-process dashboard (docs/benchmarks.md)."""

    def __init__(self, state_dir: Path, *, readonly: bool = False, timeout: float = 5.0, reader: bool = True) -> None:
        """Connect and exchange hellos (WireError on a version mismatch; OSError when nobody listens)."""
        self.path = socket_path(state_dir)
        self.readonly = readonly
        peer.check_path(Path(state_dir), self.path)  # UntrustedPeer: nothing of another user's is read
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(timeout)
        try:
            _connect(sock, self.path, timeout)
            peer.check_serve(sock, self.path)
            hello = read_message(sock)
            if hello.get("type") == "error":
                raise WireError(str(hello.get("text")))
            check_version(hello.get("version"), serve_side=False)
            send_message(sock, {"type": "hello", "version": WIRE_VERSION, "pid": os.getpid(), "readonly": readonly})
        except BaseException:
            sock.close()
            raise
        sock.settimeout(None)
        self.sock = sock
        self.hello = hello
        self.pid = int(hello["pid"])
        self.interval = float(hello["interval"])
        self.frame: NodeFrame | None = None
        self.frames = 0
        self.moved_on = 0
        """Frames rebuilt from the last one and a history delta (the rest came whole)."""
        self.gone: str | None = None
        """Why the connection ended (``None`` while attached)."""
        self._ids = itertools.count(1)
        self._pending: dict[int, Future[Any]] = {}
        self._lock = threading.Lock()
        self._send_lock = threading.Lock()
        # Shielded like the runtime's: a subscriber that raises is reported, the reader thread goes on.
        self._frame_subs: Hub[FrameSubscriber] = Hub("frame")
        self._error_subs: Hub[ErrorSubscriber] = Hub("poll error")
        self._gone_subs: Hub[ErrorSubscriber] = Hub("serve gone")
        self._ramp_subs: Hub[RampSubscriber] = Hub("ramp")
        self.ramps: dict[str, tuple[dict[str, Any], str, bool]] = {}
        """Newest document, status and whether it still runs, per worker (kept from the serve's updates)."""
        self._first = threading.Event()
        self._buffer = MessageBuffer(lambda: self.frame)
        # One buffer for every read: recv(n) allocates n bytes first, and 1 MiB is an mmap and a munmap (with its
        # page faults) per frame; a frame that does not fit is read on the loop's next call.
        self._chunk = bytearray(READ_CHUNK)
        self._chunk_view = memoryview(self._chunk)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: int | None = None
        self._thread: threading.Thread | None = None
        if reader:
            self._thread = threading.Thread(target=self._read_loop, name="amdtop-attach", daemon=True)
            self._thread.start()

    # -- receiving -------------------------------------------------------------------------------------------------
    def _read_loop(self) -> None:
        reason = "serve closed the connection"
        try:
            while self._dispatch(read_message(self.sock, self.frame)):
                pass
            reason = self._bye
        except (WireError, OSError) as exc:
            reason = f"serve connection lost ({exc})"
        finally:
            self._ended(reason)

    _bye = "serve closed the connection"

    def read_in(self, loop: asyncio.AbstractEventLoop) -> None:
        """Read the socket in ``loop`` from now on (call it on the loop's thread; only without a reader thread).
        Subscribers are then called on that thread."""
        if self._thread is not None or self.gone is not None:
            return
        self._loop, self._loop_thread = loop, threading.get_ident()
        self.sock.setblocking(False)
        loop.add_reader(self.sock.fileno(), self._readable)

    def _readable(self) -> None:
        """The loop's callback: read what arrived, dispatch every whole message."""
        self._read_now(block=False)

    def _read_now(self, *, block: bool, timeout: float = 0.0) -> None:
        """Read what the socket holds (with ``block``, wait up to ``timeout`` for something first) and dispatch the
        whole messages; the connection's end is handled here too."""
        if self.gone is not None:
            return
        try:
            if block and not select.select([self.sock], [], [], max(timeout, 0.0))[0]:
                return
            size = self.sock.recv_into(self._chunk, 0, socket.MSG_DONTWAIT)
            if not size:
                raise WireError("connection closed")
            for msg in self._buffer.feed(self._chunk_view[:size]):
                if not self._dispatch(msg):
                    self._stop_reading(self._bye)
                    return
        except (BlockingIOError, InterruptedError):
            return
        except (WireError, OSError) as exc:
            self._stop_reading(f"serve connection lost ({exc})")

    def _stop_reading(self, reason: str) -> None:
        if self._loop is not None:
            try:
                self._loop.remove_reader(self.sock.fileno())
            except (RuntimeError, ValueError, OSError):
                pass  # the loop or the socket closed first
        self._ended(reason)

    def _reads_inline(self) -> bool:
        """No reader serves this thread: a wait here must read the socket itself (before :meth:`read_in`, or on
        the loop's own thread, which is blocked while it waits)."""
        return self._thread is None and self._loop_thread in (None, threading.get_ident())

    def _dispatch(self, msg: dict[str, Any]) -> bool:
        """Act on one message; ``False`` once the serve said goodbye (its reason kept in ``_bye``)."""
        kind = msg.get("type")
        if kind == "frame":
            frame = msg["frame"]
            if "base_tick" in msg:
                self.moved_on += 1  # its history and kept parts came from the last frame (decode checked which)
            self.frame = frame
            self.frames += 1
            if not self._first.is_set():  # set() takes the event's lock and notifies: once, not every frame
                self._first.set()
            self._frame_subs.publish(frame, on_error=self._report)
        elif kind == "reply":
            with self._lock:
                fut = self._pending.pop(int(msg["id"]), None)
            if fut is not None:
                if msg.get("ok"):
                    fut.set_result(msg.get("value"))
                elif msg.get("gate"):
                    name, action, findings = msg["gate"]
                    fut.set_exception(GateRefused(name, action, findings))
                else:
                    err = InputError if msg.get("input") else AmdtopError
                    fut.set_exception(err(str(msg.get("error"))))
        elif kind == "ramp":
            worker = str(msg["worker"])
            self.ramps[worker] = (msg["doc"], str(msg["status"]), bool(msg.get("running")))
            self._ramp_subs.publish(
                worker, msg["doc"], str(msg["status"]), bool(msg.get("running")), on_error=self._report
            )
        elif kind == "poll_error":
            self._report(str(msg.get("text")))
        elif kind == "bye":
            self._bye = str(msg.get("reason") or "serve stopped")
            return False
        return True

    def _ended(self, reason: str) -> None:
        if self.gone is not None:
            return
        self.gone = f"amdtop serve (pid {self.pid}): {reason}"
        self._first.set()
        with self._lock:
            pending, self._pending = self._pending, {}
        for fut in pending.values():
            fut.set_exception(ServeGone(self.gone))
        self._gone_subs.publish(self.gone)

    def _report(self, text: str) -> None:
        self._error_subs.publish(text)

    def frame_now(self) -> NodeFrame:
        """The newest frame received (RuntimeError before the first, as a runtime's ``latest``)."""
        frame = self.frame
        if frame is None:
            raise RuntimeError("no sample yet")
        return frame

    def wait_first_frame(self, timeout: float) -> NodeFrame | None:
        """The first frame (the serve sends its newest at once), ``None`` after ``timeout``."""
        if self._reads_inline():
            self._wait_inline(self._first.is_set, timeout)
        self._first.wait(timeout)
        return self.frame

    def _wait_inline(self, done: Callable[[], bool], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not done() and self.gone is None:
            left = deadline - time.monotonic()
            if left <= 0:
                return
            self._read_now(block=True, timeout=left)

    # -- subscriptions ---------------------------------------------------------------------------------------------
    def subscribe(self, on_frame: FrameSubscriber, on_error: ErrorSubscriber | None = None) -> Callable[[], None]:
        removals = [self._frame_subs.add(on_frame)]
        if on_error is not None:
            removals.append(self._error_subs.add(on_error))

        def unsubscribe() -> None:
            for remove in removals:
                remove()

        return unsubscribe

    def on_gone(self, callback: ErrorSubscriber) -> None:
        """Call ``callback`` with one line once the serve goes away (at once when it already has)."""
        self._gone_subs.add(callback)
        if self.gone is not None:
            callback(self.gone)

    def on_ramp(self, callback: RampSubscriber) -> None:
        """Call ``callback(worker, doc, status, running)`` for every ramp update from now on."""
        self._ramp_subs.add(callback)

    # -- requests --------------------------------------------------------------------------------------------------
    def call_async(self, op: str, *args: Any, **kwargs: Any) -> Future[Any]:
        """Send a request; its reply completes the future (ServeGone when the serve goes first)."""
        fut: Future[Any] = Future()
        if self.gone is not None:
            fut.set_exception(ServeGone(self.gone))
            return fut
        call_id = next(self._ids)
        with self._lock:
            self._pending[call_id] = fut
        try:
            with self._send_lock:
                send_message(self.sock, {"type": "call", "id": call_id, "op": op, "args": args, "kwargs": kwargs})
        except OSError as exc:
            with self._lock:
                self._pending.pop(call_id, None)
            fut.set_exception(ServeGone(f"amdtop serve (pid {self.pid}): {exc}"))
        return fut

    def call(self, op: str, *args: Any, timeout: float = CALL_TIMEOUT_S, **kwargs: Any) -> Any:
        """Send a request and wait for its reply (its error raised here)."""
        fut = self.call_async(op, *args, **kwargs)
        if not self._reads_inline():
            return fut.result(timeout)
        self._wait_inline(fut.done, timeout)
        return fut.result(0)  # done (or failed by the connection's end), else the wait timed out

    def close(self) -> None:
        """Leave the serve (it goes on)."""
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        if self._loop is not None and not self._loop.is_closed():
            self._stop_reading("viewer left")
        self.sock.close()
        if self._thread is not None:
            self._thread.join(timeout=2)


def _remote_op(op: str, declared: Callable[..., Any]) -> Callable[..., Any]:
    """The request ``op`` as a method with the declared signature: sent by name, its reply (or the serve's error)
    returned; an op declared to return nothing is sent without waiting (the next frame answers it)."""
    if inspect.signature(declared).return_annotation in (None, "None"):

        def notify(self: RemoteService, *args: Any, **kwargs: Any) -> None:
            self.client.call_async(op, *args, **kwargs)

        return functools.wraps(declared)(notify)

    def call(self: RemoteService, *args: Any, **kwargs: Any) -> Any:
        return self.client.call(op, *args, **kwargs)

    return functools.wraps(declared)(call)


def _remote_ops(cls: C) -> C:
    """Give ``cls`` a method per wire op of :class:`~amdtop.service.api.NodeService`, read off the protocol: nothing
    of it is written twice."""
    for op in WIRE_OPS:
        setattr(cls, op, _remote_op(op, getattr(NodeService, op)))
    return cls


@_remote_ops
class RemoteService:
    """:class:`~amdtop.service.api.NodeService` over the socket: each op (:data:`~amdtop.service.api.WIRE_OPS`) is
    the serve's request of the same name, executed on the serve's :class:`~amdtop.runtime.service.LocalService` (its
    refusals and errors, read-only included, come back as they are: read-only is checked there only; a read-only
    viewer's requests run on the serve's read-only view of its service)."""

    def __init__(self, client: ServeClient, *, readonly: bool = False) -> None:
        self.client = client
        self.readonly = readonly or client.readonly or bool(client.hello.get("readonly"))

    # -- frames -----------------------------------------------------------------------------------------------------
    def subscribe(self, on_frame: FrameSubscriber, on_error: ErrorSubscriber | None = None) -> Callable[[], None]:
        return self.client.subscribe(on_frame, on_error)

    def latest(self) -> NodeFrame:
        frame = self.client.frame
        if frame is None:
            raise RuntimeError("no sample yet")
        return frame

    def deliver_in(self, loop: asyncio.AbstractEventLoop) -> None:
        self.client.read_in(loop)

    def on_ramp(self, callback: RampSubscriber) -> None:
        self.client.on_ramp(callback)

    def api_key(self, name: str) -> str | None:
        """Never read over the wire: the serve's ramp sends the key itself."""
        return None

    def close(self) -> None:
        """The serve's node stays open (the connection closes with the viewer's runtime)."""

    if TYPE_CHECKING:  # the ops _remote_ops adds, as the type checker must see them

        def __getattr__(self, op: str) -> Any: ...


class ServeNotAnswering(AmdtopError):
    """A serve holds the state dir (its lock says so) but did not let this viewer in: stopped, busy, starting."""


def attach(state_dir: Path, *, readonly: bool, reader: bool = True) -> ServeClient | None:
    """A client of the serve for ``state_dir``, or ``None`` when none runs (no process holds the serve lock: no
    socket, or a stale one of a killed serve); ``reader=False``: no reader thread (the caller's loop reads,
    :meth:`ServeClient.read_in`). :class:`ServeNotAnswering` (one line: the serve's pid and socket, what to do) when
    the serve lives but does not answer."""
    path = socket_path(state_dir)
    peer.check_path(Path(state_dir), path)  # UntrustedPeer: nothing of another user's is read
    pid = serve_lock.holder(state_dir)
    if pid is None:
        return None
    try:
        return ServeClient(state_dir, readonly=readonly, reader=reader)
    except (TimeoutError, ConnectionRefusedError, FileNotFoundError, BlockingIOError, EOFError) as exc:
        raise ServeNotAnswering(not_answering(pid, path, exc)) from None


def not_answering(pid: int, path: Path, exc: BaseException) -> str:
    """The line a viewer shows for a live serve that did not let it in."""
    who = f"amdtop serve (pid {pid or 'unknown'}, socket {path})"
    if isinstance(exc, TimeoutError | EOFError):
        if pid and serve_lock.process_state(pid) == "stopped":
            return f"{who} did not answer: it is stopped; `kill -CONT {pid}` resumes it, `kill {pid}` ends it"
        return f"{who} did not answer in time: it is busy; try again, or end it (kill {pid}) and start it again"
    return f"{who} does not accept viewers yet (starting or stopping); try again in a moment"
