"""How much concurrency one ramp client can hold, and checks on where its results go, before anything runs."""

from __future__ import annotations

import os
import resource
import tempfile
from pathlib import Path

import psutil

from amdtop.errors import InputError, os_reason
from amdtop.private_files import make_private_dirs

CLIENT_CEILING = 16384
"""In-flight requests one closed-loop client process drives at most: past this one event loop spends the step on its
own bookkeeping (and no vLLM deployment runs anywhere near this many sequences per server)."""
BYTES_PER_REQUEST = 64 * 1024
"""Client memory budgeted per in-flight request (connection, buffers, task, timings); measured ~24 KiB at 100000
(2.4 GB), doubled and rounded for headroom."""
FD_RESERVE = 64
"""File descriptors kept for everything else (the server probe, logs, the TUI)."""


def concurrency_cap() -> tuple[int, str]:
    """The largest concurrency this process can hold now, and what limits it (file descriptors, memory, ceiling)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        in_use = len(os.listdir("/proc/self/fd"))
    except OSError:
        in_use = 16
    caps = [(CLIENT_CEILING, f"one client process drives at most {CLIENT_CEILING} requests")]
    if soft != resource.RLIM_INFINITY:
        caps.append(
            (
                max(1, soft - in_use - FD_RESERVE),
                f"file descriptors: RLIMIT_NOFILE soft limit {soft}, {in_use} open; raise it with ulimit -n",
            )
        )
    avail = psutil.virtual_memory().available
    caps.append(
        (
            max(1, avail // 2 // BYTES_PER_REQUEST),
            f"memory: {avail / 2**30:.1f} GiB available, {BYTES_PER_REQUEST // 1024} KiB per in-flight request "
            "within half of it",
        )
    )
    return min(caps)


def check_concurrency(flag: str, highest: int) -> None:
    """InputError naming ``flag`` when ``highest`` is beyond :func:`concurrency_cap`."""
    cap, why = concurrency_cap()
    if highest > cap:
        raise InputError(f"{flag}: {highest} is more than this client can hold ({cap}; {why}); use at most {cap}")


def check_writable_file(flag: str, path: Path) -> None:
    """InputError unless ``path`` can be written as a file (checked before a run, so no result is lost after it)."""
    if path.is_dir():
        raise InputError(f"{flag}: {path} is a directory; give a file path, e.g. {path / 'ramp.json'}")
    parent = path.parent
    if not parent.is_dir():
        raise InputError(f"{flag}: folder {parent} does not exist; create it or pick another path")
    if not os.access(parent, os.W_OK | os.X_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise InputError(f"{flag}: {path} is not writable; fix the permissions or pick another path")


def check_writable_dir(flag: str, folder: Path) -> None:
    """InputError unless files can be created in ``folder`` (created when missing)."""
    try:
        make_private_dirs(folder)  # the state dir and its ramp folder are owner-only, as the supervisor makes them
        fd, probe = tempfile.mkstemp(prefix=".probe.", dir=folder)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise InputError(
            f"{flag}: cannot write results to {folder} ({os_reason(exc)}); pick a writable --state-dir"
        ) from None


def fallback_dir() -> Path:
    """Where results go when their own place fails mid-run (a full disk): a per-user folder in the temp dir."""
    return Path(tempfile.gettempdir()) / f"amdtop-ramp-{os.getuid()}"
