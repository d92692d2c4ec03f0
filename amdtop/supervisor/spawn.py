"""Starting one launch of a worker: its environment and argv, its log file, the child in its own session, and the
record that describes it (the supervisor saves it, and takes the launch back when it cannot)."""

from __future__ import annotations

import os
import subprocess
import time
import uuid

from amdtop.errors import AmdtopError
from amdtop.secrets import mask_argv, mask_command_line, mask_env
from amdtop.supervisor import procs
from amdtop.supervisor.launchspec import build_argv, build_env, preflight, systemd_usable
from amdtop.supervisor.profiles import Profile
from amdtop.supervisor.state import StateStore, WorkerRecord, io_error, make_dirs, open_log, rotate_log


def spawn(
    profile: Profile,
    numa: int | None,
    store: StateStore,
    *,
    vendor: str,
    restarts: int,
    log_max_bytes: int,
    log_backups: int,
    forced: tuple[str, ...] = (),
) -> tuple[WorkerRecord, subprocess.Popen[bytes]]:
    """Check, then start ``profile`` pinned to ``numa``, appending to its rotated log; returns the unsaved record and
    the child. Raises InputError/AmdtopError before anything is started. ``forced``: the launch gate's reasons that
    ``--force`` overrode, recorded with the launch."""
    launch_id = uuid.uuid4().hex[:12]
    marker = f"{profile.name}:{launch_id}"
    env = build_env(profile, os.environ, vendor=vendor, marker=marker, state_dir=str(procs.state_dir_key(store.root)))
    preflight(profile, numa, env)
    unit = f"amdtop-{profile.name}-{launch_id}" if systemd_usable() else None
    argv = build_argv(profile, numa, scope_unit=unit)
    log = store.log_path(profile.name)
    fix = "free space there or pick a writable --state-dir"
    try:
        make_dirs(log.parent)
        rotate_log(log, log_max_bytes, log_backups)
        fh = os.fdopen(open_log(log), "ab", buffering=0)
    except OSError as exc:
        raise io_error(f"worker[{profile.name}] log", log, exc, fix) from None
    with fh:
        try:
            when = time.strftime("%Y-%m-%d %H:%M:%S")
            fh.write(f"=== amdtop launch {marker} at {when}: {mask_command_line(argv)}\n".encode())
            fh.flush()
        except OSError as exc:
            raise io_error(f"worker[{profile.name}] log", log, exc, fix) from None
        offset = fh.tell()
        try:
            child = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=fh,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
                close_fds=True,
            )
        except OSError as exc:
            raise AmdtopError(f"worker[{profile.name}].command: cannot start {argv[0]!r} ({exc.strerror})") from None
    st = procs.read_stat(child.pid)
    rec = WorkerRecord(
        name=profile.name,
        launch_id=launch_id,
        pid=child.pid,
        pgid=child.pid,
        start_ticks=st.start_ticks if st else 0,
        started_at=time.time(),
        argv=tuple(mask_argv(argv)),
        env=mask_env(env),
        log=str(log),
        port=profile.port,
        url=profile.url,
        gpus=profile.gpus,
        numa_node=numa,
        restarts=restarts,
        known=((child.pid, st.start_ticks),) if st else (),
        log_offset=offset,
        forced=forced,
    )
    return rec, child
