"""Where a server amdtop did not start writes its log, or one line saying why it cannot be read.

In order: its stdout and stderr (``/proc/PID/fd/1``, ``/proc/PID/fd/2``) when they are regular files (``nohup vllm
serve ... > serve.log 2>&1``); else, for a process in a container (its id from ``/proc/PID/cgroup``), the file the
container runtime keeps its output in; else, for a systemd unit's process, its journal. A pipe, a terminal or a
socket is named in the reason: nothing amdtop could follow holds what it writes.

A container's log file and a unit's journal are followed (:attr:`FoundLog.follow`): the log tail decodes the
runtime's format (:mod:`amdtop.logread.rccl.container_log`) and runs ``journalctl -f -o cat`` on the unit
(:mod:`amdtop.logread.rccl.journal`), so their lines reach the parser as a file's do.
"""

from __future__ import annotations

import glob
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

from amdtop.logread.rccl.journal import journal_address
from amdtop.procinfo import PROC, start_time

_CONTAINER = re.compile(r"(?:docker|libpod|cri-containerd|crio)[-/]([0-9a-f]{64})(?:\.scope)?\b|/([0-9a-f]{64})(?:$|/)")
"""A container id in a cgroup path: ``docker-<id>.scope`` (systemd driver), ``/docker/<id>`` (cgroupfs driver),
``libpod-<id>.scope`` (podman), ``cri-containerd-<id>.scope`` / ``crio-<id>.scope`` (Kubernetes)."""
_UNIT = re.compile(r"/([^/]+\.service)$")
DOCKER_ROOT = Path("/var/lib/docker/containers")
PODMAN_ROOT = Path("/var/lib/containers/storage/overlay-containers")
CRI_ROOT = Path("/var/log/containers")


@dataclass(frozen=True, slots=True)
class FoundLog:
    """A found server's log: the files to follow (stdout's first) and, where there are none, why; or where its
    output goes instead (a journal, a container log in a runtime's own format)."""

    paths: tuple[str, ...] = ()
    note: str | None = None
    unit: str | None = None
    """The systemd unit whose journal holds the output (``journalctl _SYSTEMD_UNIT=``), where that is where it goes."""
    container: str | None = None
    """The container id (64 hex digits) from the process's cgroup."""
    follow: tuple[str, ...] = ()
    """Sources followed where there is no plain file: a container runtime's log file (decoded as read) or a journal
    address (``journalctl: _SYSTEMD_UNIT=...``)."""

    @property
    def path(self) -> str | None:
        """The log to show as the worker's ``log`` (stdout's file where both are files)."""
        return self.paths[0] if self.paths else None


def _describe(target: str) -> str:
    if target.startswith("pipe:"):
        return f"a pipe ({target})"
    if target.startswith("socket:"):
        return f"a socket ({target})"
    if target.startswith(("/dev/pts/", "/dev/tty")):
        return f"a terminal ({target})"
    if target == "/dev/null":
        return "/dev/null"
    return target


def _fd(pid: int, fd: int, proc: Path) -> tuple[str | None, str]:
    """``(path of the regular file, what it is)`` for ``/proc/PID/fd/N``; the path is ``None`` unless it is a file
    amdtop can read."""
    link = f"{proc}/{pid}/fd/{fd}"
    try:
        target = os.readlink(link)
    except PermissionError:
        return None, "unreadable (another user's process: run amdtop as that user or as root)"
    except OSError:
        return None, "closed"
    try:
        st = os.stat(link)
    except OSError:
        return None, _describe(target)
    if not stat.S_ISREG(st.st_mode):
        return None, _describe(target)
    if target.endswith(" (deleted)"):
        return None, f"a deleted file ({target})"
    if not os.access(target, os.R_OK):
        return None, f"{target}, which amdtop may not read"
    return target, target


def _cgroup(pid: int, proc: Path) -> str:
    try:
        with open(f"{proc}/{pid}/cgroup", encoding="utf-8", errors="replace") as fh:
            return fh.read()
    except OSError:
        return ""


def container_id(cgroup: str) -> str | None:
    """The container id a ``/proc/PID/cgroup`` text names, ``None`` outside a container."""
    for line in cgroup.splitlines():
        m = _CONTAINER.search(line.rpartition(":")[2])
        if m:
            return m.group(1) or m.group(2)
    return None


def systemd_unit(cgroup: str) -> str | None:
    """The ``.service`` unit a ``/proc/PID/cgroup`` text names (cgroup v2 or v1's ``name=systemd``)."""
    for line in cgroup.splitlines():
        _h, _sep, rest = line.partition(":")
        controllers, _sep, path = rest.partition(":")
        if controllers not in ("", "name=systemd"):
            continue
        m = _UNIT.search(path)
        if m and not m.group(1).startswith(("user@", "session-")):
            return m.group(1)
    return None


def container_log(cid: str) -> tuple[str | None, str]:
    """``(file, runtime)`` holding a container's output, ``None`` when no runtime's file for ``cid`` is readable."""
    candidates = [
        (DOCKER_ROOT / cid / f"{cid}-json.log", "docker json-file"),
        (PODMAN_ROOT / cid / "userdata" / "ctr.log", "podman k8s-file"),
        *((Path(p), "CRI") for p in sorted(glob.glob(f"{CRI_ROOT}/*-{cid}.log"))),
    ]
    for path, runtime in candidates:
        if os.access(path, os.R_OK):
            return str(path), runtime
    return None, ""


def find_log(pid: int, proc: Path = PROC) -> FoundLog:
    """Where server ``pid`` (its API server, the process whose stdout the user redirected) writes its log."""
    out, out_what = _fd(pid, 1, proc)
    err, err_what = _fd(pid, 2, proc)
    files = tuple(dict.fromkeys(p for p in (out, err) if p))
    if files:
        return FoundLog(files)
    cgroup = _cgroup(pid, proc)
    cid = container_id(cgroup)
    if cid is not None:
        path, runtime = container_log(cid)
        if path is not None:
            return FoundLog(
                (), f"in container {cid[:12]}: following its runtime's log {path} ({runtime})", container=cid,
                follow=(path,),
            )  # fmt: skip
        # no json-file, k8s-file or CRI file: its runtime's journald driver, if that is the one, tags each line
        # with the container's full id (the found reader checks the journal holds any before saying it follows it)
        return FoundLog(
            (), f"in container {cid[:12]}: no runtime log file for it is readable: following its journal entries "
            f"(journalctl CONTAINER_ID_FULL={cid[:12]}...)", container=cid,
            follow=(journal_address([f"CONTAINER_ID_FULL={cid}"], start_time(pid, proc)),),
        )  # fmt: skip
    unit = systemd_unit(cgroup)
    if unit is not None and ("socket" in out_what or "socket" in err_what):
        # a user manager's unit is logged under _SYSTEMD_USER_UNIT (systemd.journal-fields(7))
        field = "_SYSTEMD_USER_UNIT" if "/user@" in cgroup else "_SYSTEMD_UNIT"
        address = journal_address([f"{field}={unit}"], start_time(pid, proc))
        return FoundLog(
            (), f"its output goes to the journal of {unit}: following journalctl {field}={unit}", unit=unit,
            follow=(address,),
        )  # fmt: skip
    same = out_what if out_what == err_what else f"{out_what}, stderr is {err_what}"
    return FoundLog(
        (), f"log not readable: stdout is {same}; restart it with its output in a file (> serve.log 2>&1) or adopt it"
    )
