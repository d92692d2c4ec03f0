"""Which files hold a worker's RCCL/NCCL output: ``NCCL_DEBUG_FILE`` per rank (``%h``/``%p`` expanded) and its stdout log."""

from __future__ import annotations

import glob
import socket
from collections.abc import Mapping, Sequence
from pathlib import Path

from amdtop.model import WorkerStatus


def short_hostname() -> str:
    """Host name as RCCL/NCCL print it: cut at the first dot."""
    return socket.gethostname().split(".", 1)[0]


def expand_debug_file(pattern: str, hostname: str, pid: int | str) -> str:
    """``NCCL_DEBUG_FILE`` for one process: ``%h`` -> host, ``%p`` -> pid (``%%`` -> ``%``)."""
    out = []
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if c == "%" and i + 1 < len(pattern):
            nxt = pattern[i + 1]
            out.append({"h": hostname, "p": str(pid), "%": "%"}.get(nxt, c + nxt))
            i += 2
            continue
        out.append(c)
        i += 1
    return "".join(out)


def worker_sources(
    worker: WorkerStatus, env: Mapping[str, str] | None = None, hostname: str | None = None
) -> list[tuple[str, Path]]:
    """``(worker, path)`` pairs to follow for ``worker``.

    With ``NCCL_DEBUG_FILE`` in ``env``: one file per rank process (known pids, plus any existing file the pattern
    matches, so ranks spawned later are found on the next call); the stdout log is followed too because PyTorch
    watchdog and vLLM errors land there. Without it: the stdout log alone.
    """
    host = hostname or short_hostname()
    paths: list[Path] = []
    pattern = (env or {}).get("NCCL_DEBUG_FILE")
    if pattern:
        pids: Sequence[int] = [pid for _rank, pid in worker.rank_pids] or list(worker.pids)
        for pid in pids:
            paths.append(Path(expand_debug_file(pattern, host, pid)))
        if "%p" in pattern:
            for match in sorted(glob.glob(glob.escape(expand_debug_file(pattern, host, "\0")).replace("\0", "*"))):
                paths.append(Path(match))
        else:
            paths.append(Path(expand_debug_file(pattern, host, 0)))
    if worker.log:
        paths.append(Path(worker.log))
    seen: set[Path] = set()
    out = []
    for p in paths:
        if p not in seen:
            seen.add(p)
            out.append((worker.name, p))
    return out
