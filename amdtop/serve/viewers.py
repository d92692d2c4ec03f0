"""One connected viewer on the serve's side: a bounded frame queue and one writer thread.

A frame for a viewer that has read everything so far goes out from the publishing thread in one non-blocking send
(the kernel's socket buffer takes a frame whole): the writer thread then sleeps through the tick instead of being
woken for it, a thread hand-off per frame and viewer that the in-process dashboard does not pay. Whatever the send
could not take, and everything queued, is the writer's.

Frames are the only messages that may be dropped: a viewer that reads slower than the serve ticks loses its oldest
unsent frames (counted), so a stalled viewer costs the serve at most ``QUEUE_FRAMES`` frames of memory. Replies to
control requests and ramp updates are few and never dropped one by one: a viewer that lets ``QUEUE_MESSAGES`` of
them pile up unread is itself dropped (its connection closed, one line on the serve's stderr).
"""

from __future__ import annotations

import socket
import sys
import threading
import time
from collections import deque

from amdtop.pipeline.frame import NodeFrame
from amdtop.serve.delta import held_back, history_delta
from amdtop.serve.wakes import WakeGate
from amdtop.serve.wire import encode

QUEUE_FRAMES = 4
"""Frames held for one viewer; older ones are dropped for a slow viewer (a newer frame supersedes them)."""
QUEUE_MESSAGES = 256
"""Replies and updates held unsent for one viewer before it is dropped: it stopped reading."""


class FramePacket:
    """One frame as it goes to the viewers: whole, or (for a viewer whose last frame was the one before it, and where
    the history only moved on by a point) with references in place of its history and of the parts it shares with the
    one before (:func:`~amdtop.serve.delta.held_back`).
    Each form is pickled once, when the first viewer needs it, and the same bytes go to every viewer that gets it."""

    def __init__(self, frame: NodeFrame, previous: NodeFrame | None = None) -> None:
        self.frame = frame
        self.base = previous
        self._delta = None if previous is None else history_delta(previous.history, frame.history)
        self._lock = threading.Lock()
        self._whole: bytes | None = None
        self._moved: bytes | None = None

    def whole(self) -> bytes:
        with self._lock:
            if self._whole is None:
                self._whole = encode({"type": "frame", "frame": self.frame})
            return self._whole

    def after(self, last: NodeFrame | None) -> bytes:
        """The bytes for a viewer whose last frame was ``last``."""
        if self._delta is None or last is None or last is not self.base:
            return self.whole()
        with self._lock:
            if self._moved is None:
                held = held_back(last, self.frame, self._delta)
                self._moved = encode({"type": "frame", "frame": held, "base_tick": last.tick})
            return self._moved


class ViewerLink:
    """The serve's end of one viewer connection."""

    def __init__(self, sock: socket.socket, peer_pid: int, readonly: bool, wake_gap: float = 1.0) -> None:
        self.sock = sock
        self.peer_pid = peer_pid
        self.readonly = readonly
        self.dropped = 0
        """Frames dropped because the viewer read too slowly."""
        self.sent = 0
        self.wakes = WakeGate(wake_gap)
        """This viewer's wakes of the node: one a gap, the rest held and coalesced (:mod:`amdtop.serve.wakes`)."""
        self._frames: deque[FramePacket] = deque(maxlen=QUEUE_FRAMES)
        self._last: NodeFrame | None = None
        """The frame this viewer got last (the writer thread's own)."""
        self._other: deque[bytes] = deque()
        self._rest = b""
        """The tail of a frame the publishing thread's send could not take: the writer sends it before anything."""
        self._busy = False
        """One thread (the publisher's direct send or the writer) holds the socket and ``_last``."""
        self._flushing = False
        """A closing flush waits for the socket to be let go."""
        self._cond = threading.Condition()
        self._closed = False
        self._thread = threading.Thread(target=self._write_loop, name=f"serve-viewer-{peer_pid}", daemon=True)

    def start(self) -> ViewerLink:
        self._thread.start()
        return self

    @property
    def closed(self) -> bool:
        return self._closed

    def offer_frame(self, packet: FramePacket) -> None:
        """Send a frame now when the viewer has read everything so far and the socket takes it, else queue it (the
        oldest queued one is dropped when the queue is full). Never blocks the caller."""
        with self._cond:
            if self._closed:
                return
            if self._busy or self._rest or self._other or self._frames or not self._thread.is_alive():
                if len(self._frames) == self._frames.maxlen:
                    self.dropped += 1
                self._frames.append(packet)
                self._cond.notify()
                return
            self._busy = True
        data, rest = b"", b""
        try:
            data, self._last = packet.after(self._last), packet.frame
            try:
                taken = self.sock.send(data, socket.MSG_DONTWAIT)
            except BlockingIOError:
                taken = 0
            rest = data[taken:]
            self.sent += 1
        except OSError:
            self.close()
        finally:
            with self._cond:
                # The tail is the writer's before the socket is let go: nothing may cut into a frame half sent.
                self._rest = rest
                self._busy = False
                if self._rest or self._other or self._frames or self._flushing:
                    self._cond.notify_all()  # only then: a writer woken for nothing is what this path saves

    def send(self, message: dict[str, object]) -> None:
        """Queue a message that must arrive (a reply, a ramp update)."""
        data = encode(message)
        with self._cond:
            if self._closed:
                return
            over = len(self._other) >= QUEUE_MESSAGES
            if not over:
                self._other.append(data)
                self._cond.notify()
        if over:
            self.drop(f"{QUEUE_MESSAGES} replies or updates left unread")

    @property
    def queued(self) -> int:
        """Replies and updates waiting to be written."""
        return len(self._other)

    def drop(self, reason: str) -> None:
        """Close a viewer that broke a bound, saying why on the serve's stderr (the viewer, which is not reading, sees
        its connection closed: a goodbye written now could cut into a frame the writer is sending)."""
        if self._closed:
            return
        sys.stderr.write(f"amdtop: viewer pid {self.peer_pid} dropped: {reason}\n")
        sys.stderr.flush()
        self.close()

    def _write_loop(self) -> None:
        while True:
            with self._cond:
                while not self._closed and (self._busy or not (self._rest or self._other or self._frames)):
                    self._cond.wait()
                if self._closed:
                    return
                item: bytes | FramePacket
                if self._rest:
                    item, self._rest, counted = self._rest, b"", True
                else:
                    item, counted = (self._other.popleft() if self._other else self._frames.popleft()), False
                self._busy = True
            try:
                if isinstance(item, FramePacket):
                    data, self._last = item.after(self._last), item.frame
                else:
                    data = item
                self.sock.sendall(data)
                if not counted:
                    self.sent += 1
            except OSError:
                self.close()
                return
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()  # a direct send or a closing flush waits for the socket

    def close(self) -> None:
        """Stop writing and close the socket (idempotent)."""
        with self._cond:
            if self._closed:
                return
            self._closed = True
            self._cond.notify_all()
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()

    def flush_and_close(self, message: dict[str, object], timeout: float = 1.0) -> None:
        """Queue a last message (serve stopping), give the writer ``timeout`` to send what is queued, close."""
        self.begin_close(message)
        self.finish_close(time.monotonic() + timeout)

    def begin_close(self, message: dict[str, object]) -> None:
        """Queue a last message and drop the queued frames: the writer sends what is left from now on. The serve
        begins every viewer's close before it waits for any (:meth:`finish_close`), so viewers that stopped reading
        cost one bound together, not one each."""
        self.send(message)
        with self._cond:
            self._flushing = True
            self._frames.clear()

    def finish_close(self, deadline: float) -> None:
        """Wait until what is queued is sent or the monotonic ``deadline`` passes, then close."""
        with self._cond:
            self._cond.wait_for(
                lambda: self._closed or not (self._other or self._rest or self._busy), max(deadline - time.monotonic(), 0)
            )
        self.close()
