"""The one process-adoption rule: an ``AMDTOP_WORKER`` marker is evidence, never authority.

Any process can put ``AMDTOP_WORKER=<name>:<id>`` and ``AMDTOP_STATE_DIR`` into its environment. A marked process
is taken as a launch of this state dir only when

- it runs as this user, who must also own the state dir (as root, another user's process is never adopted, signalled
  or recorded: root can read every environment, so the marker alone would hand root's control to anyone);
- its name is a worker name (names become file names in the state dir); a malformed one is ignored with a note;
- its launch id is one this state dir launched: the state file names it, or a ``=== amdtop launch <name>:<id>`` line
  in the worker's own log (or a rotated copy) does. The launch line is written before anything starts, so every real
  launch has one.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from amdtop.procinfo import PROC

LOG_BACKUPS_SEARCHED = 3
"""Rotated copies (``.1`` .. ``.3``) searched for a launch line: the supervisor keeps three."""


def is_worker_name(name: str) -> bool:
    """The rule for worker names (letters, digits, ``-_.``; not only dots): they become file names in the state dir."""
    return bool(name) and all(c.isalnum() or c in "-_." for c in name) and name.strip(".") != ""


def process_uid(pid: int, proc: Path = PROC) -> int | None:
    """Owner of process ``pid`` (its ``/proc/PID`` entry), ``None`` when gone."""
    try:
        return os.stat(proc / str(pid)).st_uid
    except OSError:
        return None


def owner_uid(state_dir: Path) -> int:
    """The user whose processes this state dir may adopt: this user, and only while the state dir is theirs too."""
    me = os.geteuid()
    try:
        return me if os.stat(state_dir).st_uid == me else -1
    except FileNotFoundError:
        return me  # nothing written yet: the first write makes it ours
    except OSError:
        return -1


def is_own_process(pid: int, proc: Path = PROC, uid: int | None = None) -> bool:
    """True when ``pid`` runs as ``uid`` (default: this user)."""
    return process_uid(pid, proc) == (os.geteuid() if uid is None else uid)


def malformed_marker_note(pid: int, marker: str) -> str | None:
    """Why the marker of ``pid`` cannot name a launch, ``None`` when it can."""
    name, sep, launch_id = marker.rpartition(":")
    if not sep or not launch_id:
        return f"ignored process {pid}: its AMDTOP_WORKER marker {marker[:60]!r} is not NAME:LAUNCH-ID"
    if not is_worker_name(name):
        return f"ignored process {pid}: its AMDTOP_WORKER marker {marker[:60]!r} is not a worker name"
    return None


def launch_is_known(state_dir: Path, name: str, launch_id: str) -> bool:
    """Whether this state dir launched ``name:launch_id``: its state file or its log's launch lines say so."""
    try:
        doc = json.loads((state_dir / "workers" / f"{name}.json").read_text())
        if isinstance(doc, dict) and doc.get("launch_id") == launch_id:
            return True
    except (OSError, ValueError):
        pass
    needle = f"=== amdtop launch {name}:{launch_id} ".encode()
    log = state_dir / "logs" / f"{name}.log"
    for path in (log, *(log.with_name(f"{log.name}.{i}") for i in range(1, LOG_BACKUPS_SEARCHED + 1))):
        if _contains(path, needle):
            return True
    return False


def _contains(path: Path, needle: bytes, chunk: int = 1 << 20) -> bool:
    """Whether ``path`` holds ``needle`` (read in chunks: a worker log may be 50 MB)."""
    try:
        with open(path, "rb") as fh:
            tail = b""
            while block := fh.read(chunk):
                if needle in tail + block:
                    return True
                tail = block[-len(needle) :]
    except OSError:
        return False
    return False
