"""The serve <-> viewer wire format: what is sent, length-prefixed over the serve's Unix socket, versioned by a hello.

Each message is a 4-byte big-endian length and a pickled dict. Pickle can run code on load, so two things hold:
who may send one is checked before a byte of it is read (:mod:`amdtop.serve.peer`: the state dir and the socket are
this user's, SO_PEERCRED says the peer runs as this user, or root for a serve), and what it may name is an
allow-list: exactly the types the node service's protocol carries (:func:`amdtop.service.protocol.travelling_types`),
resolved from those classes themselves (a message never makes this process import a module), never a function such
as ``os.system``. A message the serve reads from a viewer is also looked at opcode by opcode before it is loaded
(:func:`refuse_unbounded`): a 60-byte pickle may otherwise declare a 4 GiB bytearray, which the unpickler allocates
before reading it. A wire format that cannot run code at all (msgpack or JSON of the frame's fields) is the node
service's to settle. Frames are pickled once per tick and the same bytes go to every viewer; the delta forms a viewer
that holds the previous tick gets are :mod:`amdtop.serve.delta`'s.
"""

from __future__ import annotations

import io
import pickle
import pickletools
import socket
import struct
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from amdtop.pipeline.frame import NodeFrame
from amdtop.serve.delta import HELD_NAME, resolve_held
from amdtop.serve.errors import WireError
from amdtop.serve.reducers import REDUCERS
from amdtop.service.protocol import fingerprint, travelling_types

__all__ = ["WireError"]

WIRE_PROTOCOL = "0.5"
"""The envelope (length-prefixed pickled dicts, the hello, the call/reply/frame/ramp/bye messages): changed by hand
only when a message's own keys change. What the messages carry is fingerprinted
(:func:`~amdtop.service.protocol.fingerprint`)."""
ALLOWED: dict[tuple[str, str], type] = {(t.__module__, t.__qualname__): t for t in travelling_types()}
"""Every name a message may carry, and the class it names: the protocol's travelling types, nothing else."""


WIRE_VERSION = f"{WIRE_PROTOCOL}-{fingerprint()}"
"""What a viewer and a serve compare in their hellos: of different versions they refuse, naming both."""
SOCKET_NAME = "serve.sock"
MAX_MESSAGE = 64 << 20
"""A frame is well under this; a larger length means a broken peer."""
MAX_CALL = 1 << 20
"""A viewer's call (a worker name, a retune's changes, a ramp's settings) is well under this."""
_HEADER = struct.Struct(">I")


def socket_path(state_dir: Path) -> Path:
    """Where the serve for ``state_dir`` listens."""
    return Path(state_dir) / SOCKET_NAME


def encode(message: dict[str, Any]) -> bytes:
    """One message as it goes on the wire."""
    out = io.BytesIO()
    pickler = pickle.Pickler(out, protocol=pickle.HIGHEST_PROTOCOL)
    pickler.dispatch_table = REDUCERS
    pickler.dump(message)
    body = out.getvalue()
    return _HEADER.pack(len(body)) + body


def _read_exact(sock: socket.socket, n: int) -> bytes:
    chunks = []
    while n:
        chunk = sock.recv(min(n, 1 << 20))
        if not chunk:
            raise WireError("connection closed")
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def allowed_class(module: str, name: str) -> type | None:
    """The class ``module.name`` when a message may name it (one of :data:`ALLOWED`), else ``None``. Nothing is
    imported: a name outside the protocol is refused whatever module it names."""
    return ALLOWED.get((module, name))


class WireUnpickler(pickle.Unpickler):
    """An unpickler that resolves only :func:`allowed_class` names (a ``WireError`` names any other), and the parts a
    frame holds back (:func:`held_back`) only from ``last``, the frame this viewer holds."""

    def __init__(self, file: io.BytesIO, last: NodeFrame | None = None) -> None:
        super().__init__(file)
        self._last = last

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) == HELD_NAME:
            return self._held
        cls = allowed_class(module, name)
        if cls is None:
            raise WireError(f"message names {module}.{name}, which the wire does not carry")
        return cls

    def _held(self, ref: object) -> object:
        return resolve_held(self._last, ref)


UNBOUNDED_OPS = frozenset({"BYTEARRAY8"})
"""Opcodes whose declared size the unpickler allocates before it reads a byte of it (CPython's
``load_counted_bytearray``): a short message could make the serve allocate and touch gigabytes."""


def refuse_unbounded(body: bytes) -> None:
    """WireError when ``body`` holds an opcode of :data:`UNBOUNDED_OPS`, or a count past its own end (the opcodes
    are walked, nothing is built: a declared size is read from what is there, never allocated)."""
    try:
        for opcode, _arg, _pos in pickletools.genops(body):
            if opcode.name in UNBOUNDED_OPS:
                raise WireError(f"message carries a {opcode.name}, which the wire does not carry")
    except WireError:
        raise
    except Exception as exc:  # a count past the end, an unknown opcode: a broken or hostile peer
        raise WireError(f"unreadable message: {str(exc)[:120]}") from None


def decode(body: bytes, last: NodeFrame | None = None, *, untrusted: bool = False) -> dict[str, Any]:
    """One message's body (WireError when it is not a mapping of allowed types); a frame's references to the one
    before it resolve against ``last`` (WireError when ``last`` is not the frame its ``base_tick`` names).
    ``untrusted``: a viewer's message to the serve, looked at first (:func:`refuse_unbounded`)."""
    if untrusted:
        refuse_unbounded(body)
    try:
        message = WireUnpickler(io.BytesIO(body), last).load()
    except WireError:
        raise
    except Exception as exc:  # a truncated or foreign body: the peer is broken, not us
        raise WireError(f"unreadable message: {str(exc)[:120]}") from None
    if not isinstance(message, dict):
        raise WireError("message is not a mapping")
    if "base_tick" in message and (last is None or last.tick != message["base_tick"]):
        have = None if last is None else last.tick
        raise WireError(f"frame follows tick {message['base_tick']}, this viewer holds {have}")
    return message


def read_message(sock: socket.socket, last: NodeFrame | None = None, *, untrusted: bool = False) -> dict[str, Any]:
    """The next message from ``sock`` (blocks; a frame's references resolve against ``last``); the peer was checked
    when it connected (:mod:`amdtop.serve.peer`). ``untrusted``: a viewer's message, which the serve reads (at most
    :data:`MAX_CALL` bytes, its opcodes looked at before it is loaded)."""
    (size,) = _HEADER.unpack(_read_exact(sock, _HEADER.size))
    limit = MAX_CALL if untrusted else MAX_MESSAGE
    if size > limit:
        raise WireError(f"message of {size} bytes is over the {limit} limit")
    return decode(_read_exact(sock, size), last, untrusted=untrusted)


class MessageBuffer:
    """Bytes as a non-blocking socket gives them, cut into whole messages (what :func:`read_message` reads from a
    blocking one). Each is decoded as it is taken, against what ``last`` returns then: a frame that refers to the
    one before it needs that one taken first."""

    def __init__(self, last: Callable[[], NodeFrame | None] = lambda: None) -> None:
        self._data = bytearray()
        self._last = last

    def feed(self, data: bytes | memoryview) -> Iterator[dict[str, Any]]:
        """Add ``data``; yields the messages now whole, in order (WireError on a broken one)."""
        self._data += data
        return self._messages()

    def _messages(self) -> Iterator[dict[str, Any]]:
        while len(self._data) >= _HEADER.size:
            (size,) = _HEADER.unpack_from(self._data)
            if size > MAX_MESSAGE:
                raise WireError(f"message of {size} bytes is over the {MAX_MESSAGE} limit")
            end = _HEADER.size + size
            if len(self._data) < end:
                return
            body = bytes(self._data[_HEADER.size : end])
            del self._data[:end]
            yield decode(body, self._last())


def send_message(sock: socket.socket, message: dict[str, Any]) -> None:
    """Send one message (blocks until written)."""
    sock.sendall(encode(message))


def check_version(theirs: object, *, serve_side: bool) -> None:
    """Raise the one-line error of a version mismatch (the text names who should restart)."""
    if theirs == WIRE_VERSION:
        return
    if serve_side:
        raise WireError(f"serve is {WIRE_VERSION}, viewer {theirs}: restart the viewer")
    # The usual cause: amdtop upgraded under a serve that still runs the old code.
    raise WireError(f"serve is {theirs}, viewer {WIRE_VERSION}: restart serve")


def peer_uid(sock: socket.socket) -> int:
    """The uid of the process at the other end of a Unix socket (SO_PEERCRED: pid, uid, gid)."""
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    _pid, uid, _gid = struct.unpack("3i", creds)
    return int(uid)
