"""Who may stand at the other end of the serve's socket: the state dir as a trust boundary, SO_PEERCRED both ways.

The wire is pickle (:mod:`amdtop.serve.wire`), so whoever answers at ``<state-dir>/serve.sock`` must be someone who
could run code as us anyway: this user, or root. Two walls, as OpenSSH has for a key file:

* the path: the state dir and every folder above it must belong to this user or root and be writable by nobody
  else (a sticky ``/tmp`` above is fine), and the socket must be a socket of this user (or root), not a symlink. A
  folder another user can write lets that user plant a listener (or swap the socket) where ours should be;
* the peer: once connected, SO_PEERCRED says which uid holds the other end. A viewer accepts a serve of its own uid
  or root's; a serve accepts viewers of its own uid only. Nothing a peer sent is read before that check.

Each refusal is one line naming the path and the fix (:class:`UntrustedPeer`, an :class:`~amdtop.errors.AmdtopError`).
"""

from __future__ import annotations

import os
import socket
import stat
from pathlib import Path

from amdtop.errors import AmdtopError
from amdtop.serve.wire import peer_uid


class UntrustedPeer(AmdtopError):
    """The state dir, the socket or the process behind it is not this user's (or root's): nothing is read from it."""


def _trusted_owner(uid: int) -> bool:
    return uid in (os.geteuid(), 0)


def check_state_dir(state_dir: Path) -> None:
    """UntrustedPeer when ``state_dir`` (where it exists) or a folder above it belongs to another user or is writable
    by group or others (a sticky folder above it, such as ``/tmp``, is fine: others cannot rename what is ours)."""
    real = Path(os.path.realpath(state_dir))
    for folder in (real, *real.parents):
        try:
            st = os.stat(folder)
        except FileNotFoundError:
            continue  # not made yet: the serve creates it 0700
        except OSError:
            return  # unreadable above us: nothing planted can be reached through it by us either
        if not stat.S_ISDIR(st.st_mode):
            continue
        fix = f"chmod go-w {folder}" if _trusted_owner(st.st_uid) else "use a --state-dir of your own"
        if not _trusted_owner(st.st_uid):
            raise UntrustedPeer(
                f"state dir {state_dir}: {folder} belongs to uid {st.st_uid}, not to you; {fix} (another user could "
                "plant a serve there)"
            )
        sticky_above = folder != real and st.st_mode & stat.S_ISVTX
        if st.st_mode & 0o022 and not sticky_above:
            raise UntrustedPeer(
                f"state dir {state_dir}: {folder} is writable by others (mode {stat.S_IMODE(st.st_mode):04o}); "
                f"{fix}, or use another --state-dir (another user could plant a serve there)"
            )


def check_socket_file(path: Path) -> None:
    """UntrustedPeer when ``path`` (where it exists) is a symlink or a socket of another user; an
    :class:`~amdtop.errors.AmdtopError` when it is something else than a socket (a folder, a file)."""
    try:
        st = os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):  # no socket there (the state dir is a file: its own error later)
        return
    if stat.S_ISLNK(st.st_mode):
        raise UntrustedPeer(f"{path} is a symlink, not the serve's socket; remove it and start amdtop serve again")
    if not stat.S_ISSOCK(st.st_mode):
        kind = "a directory" if stat.S_ISDIR(st.st_mode) else "not a socket"
        raise AmdtopError(f"{path} is {kind}, not the serve's socket; remove it and start amdtop serve again")
    if not _trusted_owner(st.st_uid):
        raise UntrustedPeer(f"{path} belongs to uid {st.st_uid}, not to you; remove it and start amdtop serve again")


def check_path(state_dir: Path, path: Path) -> None:
    """Both checks of the path, before anything connects to or binds ``path`` in ``state_dir``."""
    check_state_dir(state_dir)
    check_socket_file(path)


def check_serve(sock: socket.socket, path: Path) -> None:
    """The viewer's check of a connected serve: its uid is this user's or root's (UntrustedPeer otherwise)."""
    uid = peer_uid(sock)
    if not _trusted_owner(uid):
        raise UntrustedPeer(f"{path}: the process listening there runs as uid {uid}, not as you or root; not attaching")


def viewer_allowed(sock: socket.socket) -> bool:
    """The serve's check of a viewer: the same uid as the serve."""
    return peer_uid(sock) == os.geteuid()
