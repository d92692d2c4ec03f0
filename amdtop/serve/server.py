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
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from amdtop.audit.gate import GateRefused
from amdtop.errors import AmdtopError, InputError
from amdtop.pipeline.frame import NodeFrame
from amdtop.runtime.service import LocalService
from amdtop.serve import limits, peer
from amdtop.serve.viewers import FramePacket, ViewerLink
from amdtop.serve.wire import (
    WIRE_VERSION,
    WireError,
    check_version,
    read_message,
    send_message,
    socket_path,
)
from amdtop.service.api import WIRE_OPS

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
        self._bound: tuple[int, int] | None = None
        """(device, inode) of the socket this serve created: the only file :meth:`close` removes."""

    # -- socket ----------------------------------------------------------------------------------------------------
    def bind(self) -> None:
        """Create the socket (0600; the state dir 0700); refuse when a serve already answers there, or when the state
        dir or what sits at the socket's path is not this user's alone (:mod:`amdtop.serve.peer`)."""
        peer.check_path(self.state_dir, self.path)
        self.state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        peer.check_state_dir(self.state_dir)  # made just now, or there before: either way ours alone
        if self.path.exists() or self.path.is_symlink():
            other = running_serve_pid(self.state_dir)
            if other is not None:
                raise AmdtopError(f"amdtop serve already runs for {self.state_dir} (pid {other}); stop it first")
            self.path.unlink()  # a stale socket from a serve that was killed
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
        while listener is not None:
            try:
                conn, _ = listener.accept()
            except OSError:
                return  # closed
            threading.Thread(target=self._serve_viewer, args=(conn,), name="serve-viewer-read", daemon=True).start()

    def _serve_viewer(self, conn: socket.socket) -> None:
        if not peer.viewer_allowed(conn):
            self.refused += 1
            conn.close()
            return
        link: ViewerLink | None = None
        budget = limits.CallBudget()
        try:
            send_message(conn, self._hello())
            hello = read_message(conn, untrusted=True)
            try:
                check_version(hello.get("version"), serve_side=True)
                pid, readonly = limits.parse_hello(hello)
            except WireError as exc:
                self.refused += 1
                send_message(conn, {"type": "error", "text": str(exc)})
                conn.close()
                return
            link = ViewerLink(conn, pid, readonly)
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
        self._pool.submit(limits.counted, budget, self._call, service, link, call_id, op, args, kwargs)

    def _call(
        self,
        service: LocalService,
        link: ViewerLink,
        call_id: object,
        op: str,
        args: tuple[Any, ...],
        kw: dict[str, Any],
    ) -> None:
        try:
            value = self.stats() if op in SERVE_OPS else getattr(service, op)(*args, **kw)
        except GateRefused as exc:  # the viewer's dialog shows the reasons and offers --force
            reply = _error(call_id, str(exc))
            reply["gate"] = (str(args[0]) if args else "", op, list(exc.findings))
            link.send(reply)
            return
        except Exception as exc:  # the viewer shows it as one line
            link.send(_error(call_id, str(exc) or type(exc).__name__, input_error=isinstance(exc, InputError)))
            return
        link.send({"type": "reply", "id": call_id, "ok": True, "value": value})

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
    def close(self, reason: str = "serve stopped") -> None:
        """Tell every viewer, close the socket (and remove it); the service is closed by whoever opened it."""
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
            v.flush_and_close({"type": "bye", "reason": reason})
        self._pool.shutdown(wait=False, cancel_futures=True)


def _error(call_id: object, text: str, *, input_error: bool = False) -> dict[str, Any]:
    return {"type": "reply", "id": call_id, "ok": False, "error": text, "input": input_error}


def running_serve_pid(state_dir: Path, timeout: float = 2.0) -> int | None:
    """The pid of the serve answering on ``state_dir``'s socket, or ``None`` (no socket, nobody listening)."""
    path = socket_path(state_dir)
    peer.check_path(state_dir, path)  # a listener another user planted is never read (UntrustedPeer)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        sock.connect(str(path))
        peer.check_serve(sock, path)
        hello = read_message(sock)
        return int(hello.get("pid") or 0) or None
    except (OSError, WireError, EOFError, ValueError, TypeError):
        return None
    finally:
        sock.close()
