"""``amdtop serve``: the node runtime headless for one state dir, and the Unix socket viewers attach through.

One poller, one supervisor owner and the ramps live here (in the node service :func:`amdtop.runtime.open` returned);
every viewer (a terminal ``amdtop`` or a browser tab of ``amdtop web``) gets the same frames and sends control
requests that the supervisor's owner thread executes. Only the owner's uid may connect: the socket is 0600 in a 0700 directory that nobody else may write, and each
peer is checked with SO_PEERCRED before anything it sends is read (:mod:`amdtop.serve.peer`; the wire format is pickle
with an allow-list: see :mod:`amdtop.serve.wire`). Every call's fields are checked and each viewer's calls bounded
(:mod:`amdtop.serve.limits`).
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from amdtop.audit.gate import GateRefused
from amdtop.errors import InputError
from amdtop.pipeline.frame import NodeFrame
from amdtop.runtime.service import LocalService
from amdtop.serve import limits, peer
from amdtop.serve import lock as serve_lock
from amdtop.serve.viewers import FramePacket, ViewerLink
from amdtop.serve.wakes import QUEUED
from amdtop.serve.wire import (
    WIRE_VERSION,
    WireError,
    check_version,
    read_message,
    send_message,
    socket_path,
)
from amdtop.service.api import WIRE_OPS

ACCEPT_PAUSE_S = (0.05, 1.0)
"""The accept loop's pause after a failed ``accept()`` (out of descriptors, say), doubled per failure up to the second
number: it neither spins on a backlog it cannot take nor sleeps long once descriptors are free again."""
WAKE_OPS = frozenset({"wake", "request_state_files"})
"""Requests that make the node tick now (and re-read every worker): rate-limited per viewer."""
WAKE_GAP_S = 1.0
"""One viewer's wakes closer together than this are held and run as one at the gap's end (a viewer sending ``wake``
in a loop made the serve poll 79 times a second; answered at once without a poll, the loop still cost the serve a
third of a core)."""
CLOSE_FLUSH_S = 1.0
"""How long a stopping serve gives its viewers, all together, to take their goodbye and what was queued before it."""
HELLO_TIMEOUT_S = 10.0
"""How long a connected peer may take to send its hello: one that never does holds no thread and descriptor for
ever."""

SERVE_OPS = frozenset({"stats"})
"""The serve's own read (its counters), beside the node service's requests: those are the
:class:`~amdtop.service.api.NodeService` methods of the same name (:data:`~amdtop.service.api.WIRE_OPS`)."""


class Serve:
    """Serves one opened node over the Unix socket ``<state-dir>/serve.sock``."""

    def __init__(self, service: LocalService, state_dir: Path, *, notes: list[str] | None = None) -> None:
        self.service = service
        """What every viewer's request runs on, by its name: the same service the in-process dashboard holds (its
        ``readonly`` is the serve's own ``--readonly``)."""
        self._read_only = service.read_only()
        """Where a read-only viewer's requests run: the service's one read-only check refuses its control."""
        self.runtime = service.runtime
        self.state_dir = Path(state_dir)
        self.path = socket_path(self.state_dir)
        self.readonly = service.readonly
        self.notes = list(notes or service.notes)
        self._previous: NodeFrame | None = None
        """The last frame published (the runtime's thread only): what the next frame's history moved on from."""
        self.ramps = self.service.node_ramps
        self.service.on_ramp(self._publish_ramp)
        self._viewers: list[ViewerLink] = []
        self._lock = threading.Lock()
        self._listener: socket.socket | None = None
        self._pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="serve-call")
        self._unsubscribe: Callable[[], None] | None = None
        self.refused = 0
        """Connections refused (another uid, a version mismatch)."""
        self._lock_file: serve_lock.ServeLock | None = None
        """The state dir's serve lock, held from :meth:`bind` to :meth:`close` (:mod:`amdtop.serve.lock`)."""
        self._bound: tuple[int, int] | None = None
        """(device, inode) of the socket this serve created: the only file :meth:`close` removes."""

    # -- socket ----------------------------------------------------------------------------------------------------
    def bind(self) -> None:
        """Create the socket (0600; the state dir 0700); refuse when a serve already answers there, or when the state
        dir or what sits at the socket's path is not this user's alone (:mod:`amdtop.serve.peer`)."""
        peer.check_path(self.state_dir, self.path)
        self.state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        peer.check_state_dir(self.state_dir)  # made just now, or there before: either way ours alone
        # The lock, not a reply, says whether a serve lives here: one that is stopped or busy keeps it.
        self._lock_file = serve_lock.take(self.state_dir)
        if self.path.exists() or self.path.is_symlink():
            self.path.unlink()  # nobody holds the lock: a stale socket from a serve that was killed
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)  # the socket is born 0600: no window in which another user could connect
        try:
            listener.bind(str(self.path))
        finally:
            os.umask(old)
        os.chmod(self.path, 0o600)
        st = os.lstat(self.path)
        self._bound = (st.st_dev, st.st_ino)
        listener.listen(16)
        self._listener = listener

    def start(self) -> Serve:
        """Bind (unless bound), subscribe to the runtime and accept viewers in a thread."""
        if self._listener is None:
            self.bind()
        self._unsubscribe = self.runtime.subscribe(self._on_frame, self._on_error)
        threading.Thread(target=self._accept_loop, name="serve-accept", daemon=True).start()
        return self

    def _accept_loop(self) -> None:
        listener = self._listener
        pause = ACCEPT_PAUSE_S[0]
        while listener is not None:
            try:
                conn, _ = listener.accept()
            except OSError as exc:
                if self._listener is not listener:
                    return  # closed by close()
                # Out of descriptors (EMFILE, ENFILE), memory or buffers, or a peer gone before we took it: the
                # listener still stands. Pause (the connections wait in the backlog) and accept again, once viewers
                # let descriptors go; the loop never ends while the serve runs.
                if pause == ACCEPT_PAUSE_S[0]:
                    sys.stderr.write(f"amdtop: warning: accepting a viewer failed ({exc.strerror or exc}); retrying\n")
                    sys.stderr.flush()
                time.sleep(pause)
                pause = min(pause * 2, ACCEPT_PAUSE_S[1])
                continue
            pause = ACCEPT_PAUSE_S[0]
            try:
                threading.Thread(target=self._serve_viewer, args=(conn,), name="serve-viewer-read", daemon=True).start()
            except RuntimeError:  # no thread to be had: this viewer is turned away, the next one tried
                conn.close()

    def _serve_viewer(self, conn: socket.socket) -> None:
        if not peer.viewer_allowed(conn):
            self.refused += 1
            conn.close()
            return
        link: ViewerLink | None = None
        budget = limits.CallBudget()
        try:
            conn.settimeout(HELLO_TIMEOUT_S)
            send_message(conn, self._hello())
            hello = read_message(conn, untrusted=True)
            conn.settimeout(None)
            try:
                check_version(hello.get("version"), serve_side=True)
                pid, readonly = limits.parse_hello(hello)
            except WireError as exc:
                self.refused += 1
                send_message(conn, {"type": "error", "text": str(exc)})
                conn.close()
                return
            link = ViewerLink(conn, pid, readonly, WAKE_GAP_S)
            # The newest frame (with its history) and every ramp first: the viewer draws at once.
            frame = self.runtime.frame
            if frame is not None:
                link.offer_frame(FramePacket(frame))
            for worker, doc, status, running in self.ramps.documents():
                link.send({"type": "ramp", "worker": worker, "doc": doc, "status": status, "running": running})
            with self._lock:
                self._viewers.append(link)
            link.start()
            while True:
                self._handle(link, read_message(conn, untrusted=True), budget)
        except (WireError, OSError, EOFError):
            pass  # the viewer went away (closed, killed): the serve goes on
        finally:
            if link is not None:
                for _ in range(link.wakes.close()):  # held wakes of a viewer gone: not run, their places given back
                    budget.give()
                link.close()
                with self._lock:
                    self._viewers = [v for v in self._viewers if v is not link]
            else:
                conn.close()

    def _hello(self) -> dict[str, Any]:
        return {
            "type": "hello",
            "version": WIRE_VERSION,
            "pid": os.getpid(),
            "interval": self.runtime.interval,
            "notes": self.notes,
            # The serve's own --readonly only: a node without profiles still signals GPU processes and refuses a
            # launch with the reason the in-process dashboard gives (no profile file), not "read-only".
            "readonly": self.readonly,
            "demo": self.service.demo,
            "state_dir": str(self.state_dir),
        }

    # -- requests --------------------------------------------------------------------------------------------------
    def _handle(self, link: ViewerLink, msg: dict[str, Any], budget: limits.CallBudget | None = None) -> None:
        if msg.get("type") != "call":
            return
        try:
            op, call_id, args, kwargs = limits.parse_call(msg)
        except InputError as exc:
            link.send(_error(msg.get("id") if isinstance(msg.get("id"), int) else None, str(exc), input_error=True))
            return
        if op not in WIRE_OPS and op not in SERVE_OPS:
            link.send(_error(call_id, f"{op[:64]}: unknown request"))
            return
        try:
            args, kwargs = limits.check_args(op, args, kwargs)
        except InputError as exc:
            link.send(_error(call_id, str(exc), input_error=True))
            return
        if budget is not None and not budget.take(link.queued):
            link.drop(f"over {budget.limit} calls unanswered or replies unread")
            return
        service = self._read_only if link.readonly else self.service
        if op in WAKE_OPS:
            # A wake costs a tick and a pass over every worker: one per viewer per gap; those in between are held
            # and run as one at the gap's end (amdtop/serve/wakes.py).
            due = link.wakes.offer(call_id, op, time.monotonic())
            if due is not None:
                if due != QUEUED:
                    timer = threading.Timer(due, self._release_wakes, args=(service, link, budget))
                    timer.daemon = True
                    link.wakes.schedule(timer)
                return
        self._pool.submit(limits.counted, budget, self._call, service, link, call_id, op, args, kwargs)

    def _release_wakes(self, service: LocalService, link: ViewerLink, budget: limits.CallBudget | None) -> None:
        """The end of a viewer's wake gap: its held wakes run as one, and each is answered with that one's result."""
        op, ids = link.wakes.release(time.monotonic())
        try:
            if op is None:
                return
            reply = self._reply(service, None, op, (), {})  # run once; each held call gets its result or its one line
            for call_id in ids:
                link.send({**reply, "id": call_id})
        finally:
            if budget is not None:
                for _ in ids:
                    budget.give()

    def _call(
        self,
        service: LocalService,
        link: ViewerLink,
        call_id: object,
        op: str,
        args: tuple[Any, ...],
        kw: dict[str, Any],
    ) -> None:
        link.send(self._reply(service, call_id, op, args, kw))

    def _reply(
        self, service: LocalService, call_id: object, op: str, args: tuple[Any, ...], kw: dict[str, Any]
    ) -> dict[str, Any]:
        """The reply to one call: its value, or its error as one line (a gate refusal with its findings)."""
        try:
            value = self.stats() if op in SERVE_OPS else getattr(service, op)(*args, **kw)
        except GateRefused as exc:  # the viewer's dialog shows the reasons and offers --force
            reply = _error(call_id, str(exc))
            reply["gate"] = (str(args[0]) if args else "", op, list(exc.findings))
            return reply
        except Exception as exc:  # the viewer shows it as one line
            return _error(call_id, str(exc) or type(exc).__name__, input_error=isinstance(exc, InputError))
        return {"type": "reply", "id": call_id, "ok": True, "value": value}

    # -- publishing ------------------------------------------------------------------------------------------------
    def _on_frame(self, frame: NodeFrame) -> None:
        previous, self._previous = self._previous, frame
        with self._lock:
            viewers = list(self._viewers)
        if not viewers:
            return
        packet = FramePacket(frame, previous)  # pickled once per form, the same bytes to every viewer
        for v in viewers:
            v.offer_frame(packet)

    def _on_error(self, text: str) -> None:
        self._broadcast({"type": "poll_error", "text": text})

    def _publish_ramp(self, worker: str, doc: dict[str, Any], status: str, running: bool) -> None:
        self._broadcast({"type": "ramp", "worker": worker, "doc": doc, "status": status, "running": running})

    def _broadcast(self, message: dict[str, Any]) -> None:
        with self._lock:
            viewers = list(self._viewers)
        for v in viewers:
            v.send(message)

    def stats(self) -> dict[str, Any]:
        """Viewers, frames sent and dropped, polls (tests and benchmarks)."""
        with self._lock:
            viewers = list(self._viewers)
        return {
            "viewers": len(viewers),
            "viewer_pids": [v.peer_pid for v in viewers],
            "dropped": sum(v.dropped for v in viewers),
            "sent": sum(v.sent for v in viewers),
            "polls": self.runtime.polls,
            "refused": self.refused,
        }

    @property
    def viewer_count(self) -> int:
        with self._lock:
            return len(self._viewers)

    # -- shutdown --------------------------------------------------------------------------------------------------
    def close(self, reason: str = "serve stopped", *, keep_lock: bool = False) -> None:
        """Tell every viewer, close the socket (and remove it); the service is closed by whoever opened it. With
        ``keep_lock`` the serve lock stays held until :meth:`release_lock` (after that service's shutdown: until then
        this process still supervises the state dir)."""
        if self._unsubscribe is not None:
            self._unsubscribe()
        listener, self._listener = self._listener, None
        if listener is not None:
            listener.close()
        with contextlib.suppress(OSError):
            st = os.lstat(self.path)
            if (st.st_dev, st.st_ino) == self._bound:  # a refused second serve removes nothing of the first's
                self.path.unlink()
        with self._lock:
            viewers, self._viewers = self._viewers, []
        for v in viewers:
            v.begin_close({"type": "bye", "reason": reason})
        deadline = time.monotonic() + CLOSE_FLUSH_S  # one bound for all: a viewer that stopped reading waits in it
        for v in viewers:
            v.finish_close(deadline)
        self._pool.shutdown(wait=False, cancel_futures=True)
        if not keep_lock:
            self.release_lock()

    def release_lock(self) -> None:
        """Let another serve have the state dir (last: until here this process still supervises it)."""
        if self._lock_file is not None:
            self._lock_file.release()
            self._lock_file = None


def _error(call_id: object, text: str, *, input_error: bool = False) -> dict[str, Any]:
    return {"type": "reply", "id": call_id, "ok": False, "error": text, "input": input_error}


def running_serve_pid(state_dir: Path) -> int | None:
    """The pid of the serve of ``state_dir`` (0 when its pid cannot be read), or ``None`` when none runs: whoever holds
    the serve lock (:mod:`amdtop.serve.lock`), whether it answers or not (stopped, busy)."""
    peer.check_path(state_dir, socket_path(state_dir))  # a state dir another user can write is never trusted
    return serve_lock.holder(state_dir)
