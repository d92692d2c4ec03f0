"""Rebuilding a launch record from the running processes when the state file is missing, torn or stale."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

from amdtop.procinfo import read_cmdline
from amdtop.secrets import mask_argv, mask_env
from amdtop.supervisor import procs
from amdtop.supervisor.launchspec import URL_ENV, VISIBILITY_ENV
from amdtop.supervisor.profiles import Profile
from amdtop.supervisor.state import StateStore, WorkerRecord

_NODE = re.compile(r"^--cpunodebind=(\d+)$")


@dataclass(frozen=True, slots=True)
class Recovery:
    """A worker's launch record as far as it can be known, and why it is not simply the state file."""

    record: WorkerRecord | None
    reason: str | None


def _url(found: procs.FoundLaunch, argv: list[str], profile: Profile | None) -> str:
    if found.env.get(URL_ENV, "").startswith(("http://", "https://")):
        return found.env[URL_ENV]
    if profile is not None:
        return profile.url
    port = next((argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "--port"), "0")
    return f"http://127.0.0.1:{port}"


def _log_offset(log: Path, marker: str) -> int:
    """Where this launch's own lines start: just after its ``=== amdtop launch`` line (0 when not found)."""
    try:
        data = log.read_bytes()
    except OSError:
        return 0
    at = data.rfind(f"=== amdtop launch {marker} ".encode())
    if at < 0:
        return 0
    end = data.find(b"\n", at)
    return len(data) if end < 0 else end + 1


def rebuild_record(
    found: procs.FoundLaunch,
    table: dict[int, procs.ProcStat],
    store: StateStore,
    *,
    profile: Profile | None,
    numa: int | None,
    restarts: int,
    reason: str,
) -> WorkerRecord:
    """A record for the live launch ``found``; what procfs cannot tell comes from the profile, when there is one."""
    argv = list(read_cmdline(found.pid))
    url = _url(found, argv, profile)
    try:
        port = int(url.rsplit(":", 1)[1].split("/", 1)[0])
    except (IndexError, ValueError):
        port = 0
    try:
        started = psutil.Process(found.pid).create_time()
    except psutil.Error:
        started = time.time()
    gpus: tuple[int, ...] = profile.gpus if profile is not None else ()
    if profile is None:
        vis = next((found.env[v] for v in VISIBILITY_ENV.values() if found.env.get(v)), "")
        gpus = tuple(int(g) for g in vis.split(",") if g.strip().isdigit())
    if numa is None:
        numa = next((int(m[1]) for a in argv if (m := _NODE.match(a))), None)
    st = table.get(found.pid)
    log = store.log_path(found.name)
    marker = f"{found.name}:{found.launch_id}"
    return WorkerRecord(
        name=found.name,
        launch_id=found.launch_id,
        pid=found.pid,
        pgid=st.sid if st is not None else found.pid,
        start_ticks=found.start_ticks,
        started_at=started,
        argv=tuple(mask_argv(argv)),
        env=mask_env(found.env),
        log=str(log),
        port=port,
        url=url,
        gpus=gpus,
        numa_node=numa,
        restarts=restarts,
        known=tuple(sorted((p, table[p].start_ticks) for p in found.marked if p in table)),
        log_offset=_log_offset(log, marker),
        rebuilt=reason,
    )
