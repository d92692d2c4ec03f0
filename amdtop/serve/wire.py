"""The serve <-> viewer wire format: length-prefixed messages over the serve's Unix socket, versioned by a hello.

Each message is a 4-byte big-endian length and a pickled dict. Pickle runs code on load, which is acceptable here
only because the socket is the owner's alone: the file is mode 0600 in a 0700 state dir and the serve checks every
peer's uid with SO_PEERCRED, so whoever can send us a pickle could run that code as us anyway. Frames are pickled
once per tick and the same bytes go to every viewer.
"""

from __future__ import annotations

import os
import pickle
import socket
import struct
from pathlib import Path
from typing import Any

from amdtop.errors import AmdtopError

WIRE_VERSION = "0.1"
"""Bumped whenever a message or the frame's shape changes: a viewer and a serve of different versions refuse."""
SOCKET_NAME = "serve.sock"
MAX_MESSAGE = 64 << 20
"""A frame with an hour of history is well under this; a larger length means a broken peer."""
_HEADER = struct.Struct(">I")


class WireError(AmdtopError):
    """The peer closed, sent garbage, or speaks another version."""


def socket_path(state_dir: Path) -> Path:
    """Where the serve for ``state_dir`` listens."""
    return Path(state_dir) / SOCKET_NAME


def encode(message: dict[str, Any]) -> bytes:
    """One message as it goes on the wire."""
    body = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
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


def read_message(sock: socket.socket) -> dict[str, Any]:
    """The next message from ``sock`` (blocks)."""
    (size,) = _HEADER.unpack(_read_exact(sock, _HEADER.size))
    if size > MAX_MESSAGE:
        raise WireError(f"message of {size} bytes is over the {MAX_MESSAGE} limit")
    # Safe only because the peer is this user (see the module docstring).
    body = _read_exact(sock, size)
    try:
        message = pickle.loads(body)
    except Exception as exc:  # a truncated or foreign body: the peer is broken, not us
        raise WireError(f"unreadable message: {exc}") from None
    if not isinstance(message, dict):
        raise WireError("message is not a mapping")
    return message


def send_message(sock: socket.socket, message: dict[str, Any]) -> None:
    """Send one message (blocks until written)."""
    sock.sendall(encode(message))


def check_version(theirs: object, *, serve_side: bool) -> None:
    """Raise the one-line error of a version mismatch (the text names who should restart)."""
    if theirs == WIRE_VERSION:
        return
    if serve_side:
        raise WireError(f"serve is {WIRE_VERSION}, viewer {theirs}: restart the viewer")
    raise WireError(f"serve is {theirs}, viewer {WIRE_VERSION}: restart serve")


def peer_uid(sock: socket.socket) -> int:
    """The uid of the process at the other end of a Unix socket (SO_PEERCRED: pid, uid, gid)."""
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    _pid, uid, _gid = struct.unpack("3i", creds)
    return int(uid)


def own_uid() -> int:
    """This process's uid."""
    return os.getuid()
