"""Per-worker state files (atomic JSON, 0600) that let a second amdtop re-attach, plus log files and rotation."""

from __future__ import annotations

import errno
import fcntl
import json
import math
import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from amdtop.errors import AmdtopError, InputError, os_reason
from amdtop.private_files import DIR_MODE, FILE_MODE, own_file_opener
from amdtop.secrets import mask_env as mask_env
from amdtop.sysread import read_text


def io_error(what: str, path: Path | str, exc: OSError, fix: str) -> AmdtopError:
    """One line for a failed state/log write: bad input (exit 2) for a path that can never work, a runtime error for
    a full disk or anything transient."""
    line = f"{what}: cannot write {path} ({os_reason(exc)}); {fix}"
    if exc.errno in (errno.ENOTDIR, errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOENT, errno.EISDIR):
        return InputError(line)
    return AmdtopError(line)


def make_dirs(path: Path) -> None:
    """``mkdir -p`` with owner-only permissions for the folders amdtop creates."""
    path.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)


def open_log(path: Path) -> int:
    """Open a worker log for appending, created 0600 (an older, wider log is narrowed to 0600)."""
    return own_file_opener(str(path), os.O_WRONLY | os.O_APPEND | os.O_CREAT)


@dataclass(frozen=True, slots=True)
class WorkerRecord:
    """What amdtop knows about one run of a worker; written to ``<state-dir>/workers/<name>.json``."""

    name: str
    """Worker name."""
    launch_id: str
    """Random id of this run (the env marker is ``name:launch_id``)."""
    pid: int
    """PID of the launched process."""
    pgid: int
    """Its process group (== pid: launched in its own session)."""
    start_ticks: int
    """Process start time in clock ticks since boot (``/proc/PID/stat`` field 22): guards against PID reuse."""
    started_at: float
    """Wall-clock launch time."""
    argv: tuple[str, ...]
    """Launched argv."""
    env: dict[str, str]
    """Launched environment, secrets masked."""
    log: str
    """Log file."""
    port: int
    """HTTP port."""
    url: str
    """Base URL."""
    gpus: tuple[int, ...]
    """GPUs."""
    numa_node: int | None
    """Node pinned to."""
    restarts: int = 0
    """Restarts since first launch."""
    stopping: bool = False
    """A stop is in progress (or was interrupted)."""
    stopped: bool = False
    """Stopped on request (a dead process is then ``stopped``, not ``crashed``)."""
    ready_seen: bool = False
    """``/health`` answered 200 at least once."""
    known: tuple[tuple[int, int], ...] = ()
    """(pid, start_ticks) of every process seen in the worker, for the sweep."""
    shm: tuple[str, ...] = ()
    """``/dev/shm`` segments seen mapped by the worker's processes."""
    dist_ids: tuple[str, ...] = field(default=())
    """``vllm_dist_<hex>`` ids the worker logged."""
    log_offset: int = 0
    """Size of the log when this run started (its own lines follow)."""
    rebuilt: str | None = None
    """Why this record was rebuilt from the running processes (``None``: written at launch)."""
    ranks: tuple[tuple[int, int, int], ...] = ()
    """(TP rank, pid, start_ticks) of each rank process seen: a rank whose process vanished is still named."""
    rank_exits: tuple[tuple[int, int], ...] = ()
    """(TP rank, wait status) of each rank seen dead but not yet reaped (a zombie's ``stat`` holds how it ended)."""
    forced: tuple[str, ...] = ()
    """Launch-gate reasons ``--force`` overrode for this run (empty: the gate passed or did not run)."""

    def with_(self, **changes: Any) -> WorkerRecord:
        """Copy with ``changes``."""
        return replace(self, **changes)


def _to_json(rec: WorkerRecord) -> dict[str, Any]:
    doc = asdict(rec)
    doc["known"] = [list(p) for p in rec.known]
    doc["ranks"] = [list(r) for r in rec.ranks]
    doc["rank_exits"] = [list(r) for r in rec.rank_exits]
    return doc


def _from_json(doc: Mapping[str, Any], name: str | None = None) -> WorkerRecord:
    rec = WorkerRecord(
        name=str(doc["name"]),
        launch_id=str(doc["launch_id"]),
        pid=int(doc["pid"]),
        pgid=int(doc["pgid"]),
        start_ticks=int(doc["start_ticks"]),
        started_at=float(doc["started_at"]),
        argv=tuple(str(a) for a in doc["argv"]),
        env={str(k): str(v) for k, v in doc.get("env", {}).items()},
        log=str(doc["log"]),
        port=int(doc["port"]),
        url=str(doc["url"]),
        gpus=tuple(int(g) for g in doc.get("gpus", [])),
        numa_node=None if doc.get("numa_node") is None else int(doc["numa_node"]),
        restarts=int(doc.get("restarts", 0)),
        stopping=bool(doc.get("stopping", False)),
        stopped=bool(doc.get("stopped", False)),
        ready_seen=bool(doc.get("ready_seen", False)),
        known=tuple((int(p), int(t)) for p, t in doc.get("known", [])),
        shm=tuple(str(s) for s in doc.get("shm", [])),
        dist_ids=tuple(str(s) for s in doc.get("dist_ids", [])),
        log_offset=int(doc.get("log_offset", 0)),
        rebuilt=None if doc.get("rebuilt") is None else str(doc["rebuilt"]),
        ranks=tuple((int(r), int(p), int(t)) for r, p, t in doc.get("ranks", [])),
        rank_exits=tuple((int(r), int(w)) for r, w in doc.get("rank_exits", [])),
        forced=tuple(str(s) for s in doc.get("forced", [])),
    )
    # A record that cannot describe a launch of ours is as good as torn: pid/pgid 0 or 1 would make a stop signal
    # the caller's own group or init, and a record under another worker's file name is not this worker's.
    if name is not None and rec.name != name:
        raise ValueError(f"names worker {rec.name!r}")
    if rec.pid < 2 or rec.pgid < 2 or rec.start_ticks < 0:
        raise ValueError(f"pid {rec.pid} / pgid {rec.pgid} cannot be a launch")
    if not math.isfinite(rec.started_at):  # JSON's NaN would reach status --json as an uptime no parser takes
        raise ValueError(f"started_at {rec.started_at} is not a time")
    return rec


_FIX = "free space there or pick a writable --state-dir"


class StateStore:
    """The ``workers/`` folder of the state dir."""

    def __init__(self, state_dir: Path) -> None:
        """Use ``state_dir`` (created on first write)."""
        self.root = state_dir
        self.dir = state_dir / "workers"
        self.logs = state_dir / "logs"

    def path(self, name: str) -> Path:
        """State file of worker ``name``."""
        return self.dir / f"{name}.json"

    def log_path(self, name: str) -> Path:
        """Log file of worker ``name``."""
        return self.logs / f"{name}.log"

    def load(self, name: str) -> WorkerRecord | None:
        """The record of ``name``; ``None`` when absent or unreadable (see :meth:`load_checked` for why)."""
        return self.load_checked(name)[0]

    def load_checked(self, name: str) -> tuple[WorkerRecord | None, str | None]:
        """The record of ``name`` and, when there is none, why: ``"missing"`` or what is wrong with the file."""
        path = self.path(name)
        try:
            text = read_text(path)
        except FileNotFoundError:
            return None, "missing"
        except OSError as exc:
            return None, f"state file {path} unreadable ({os_reason(exc)})"
        try:
            return _from_json(json.loads(text), name), None
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            return None, f"state file {path} is corrupt ({type(exc).__name__}: {str(exc)[:60]})"

    def save(self, rec: WorkerRecord) -> None:
        """Write ``rec`` atomically (0600 temp file, fsync, rename); AmdtopError (one line) when it cannot."""
        tmp: str | None = None
        try:
            make_dirs(self.dir)
            fd, tmp = tempfile.mkstemp(prefix=f".{rec.name}.", suffix=".tmp", dir=self.dir)
            with os.fdopen(fd, "w") as fh:
                json.dump(_to_json(rec), fh, indent=1)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, self.path(rec.name))
        except OSError as exc:
            raise io_error(f"worker[{rec.name}] state", self.path(rec.name), exc, _FIX) from None
        finally:
            if tmp is not None and os.path.exists(tmp):
                Path(tmp).unlink(missing_ok=True)

    def save_last_resort(self, rec: WorkerRecord) -> str | None:
        """Record ``rec`` when :meth:`save` could not (a full disk): rewrite the state file in place when the record
        fits in the blocks the file already holds (no new space needed); else remove the file, which also needs no
        space, so that no record is left saying the run is live. Returns what was done, ``None`` when neither
        worked."""
        path = self.path(rec.name)
        data = json.dumps(_to_json(rec), indent=1).encode()
        try:
            with open(path, "r+b") as fh:
                if len(data) <= os.fstat(fh.fileno()).st_size:
                    fh.write(data)
                    fh.truncate(len(data))
                    fh.flush()
                    os.fsync(fh.fileno())
                    return "rewritten in place"
        except OSError:
            pass
        try:
            path.unlink(missing_ok=True)
        except OSError:
            return None
        return "removed"

    def check_writable(self) -> None:
        """Raise the one-line error a launch would hit when the state dir cannot hold state files and logs."""
        for folder in (self.dir, self.logs):
            try:
                make_dirs(folder)
                fd, tmp = tempfile.mkstemp(prefix=".probe.", dir=folder)
                os.close(fd)
                os.unlink(tmp)
            except OSError as exc:
                raise io_error("--state-dir", folder, exc, _FIX) from None

    @contextmanager
    def lock(self, name: str) -> Iterator[None]:
        """Hold worker ``name`` for a control action.

        flock is per open file, so this serialises actions on one worker across threads and across amdtop processes
        sharing the state dir (TUI + CLI); actions on different workers run in parallel. Where the lock file cannot
        be created (state dir unwritable or full) the action runs unlocked: stopping a worker must not depend on it.
        """
        try:
            make_dirs(self.dir)
            fh = open(self.dir / f".{name}.lock", "w", opener=own_file_opener)  # noqa: SIM115 - held across the yield
        except OSError:
            yield
            return
        with fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    def merge(self, seen: WorkerRecord, changed: dict[str, Any]) -> WorkerRecord:
        """Save what a status poll learnt about run ``seen``, unless a control action holds the worker (it owns the
        record then) or another run replaced it; returns ``seen`` with the changes either way (also when the state dir
        cannot be written: a status poll only learns, it never fails for that)."""
        try:
            make_dirs(self.dir)
            fh = open(self.dir / f".{seen.name}.lock", "w", opener=own_file_opener)  # noqa: SIM115
        except OSError:
            return seen.with_(**changed)
        with fh:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return seen.with_(**changed)
            try:
                current = self.load(seen.name)
                if current is None or current.launch_id != seen.launch_id or current.stopping:
                    return seen.with_(**changed)
                merged = current.with_(**changed)
                try:
                    self.save(merged)
                except AmdtopError:
                    pass
                return merged
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    def adopt(self, rec: WorkerRecord) -> None:
        """Save a rebuilt record unless a control action holds the worker or the state dir cannot be written (the
        record is used from memory then, and rebuilt again next time)."""
        try:
            make_dirs(self.dir)
            fh = open(self.dir / f".{rec.name}.lock", "w", opener=own_file_opener)  # noqa: SIM115
        except OSError:
            return
        with fh:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return
            try:
                self.save(rec)
            except AmdtopError:
                pass
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    def names(self) -> list[str]:
        """Names with a state file."""
        if not self.dir.is_dir():
            return []
        return sorted(p.stem for p in self.dir.glob("*.json"))


def rotate_log(path: Path, max_bytes: int, backups: int = 3) -> bool:
    """Rotate ``path`` when larger than ``max_bytes``: copy to ``.1`` (shifting older ones) and truncate in place.

    Copy-then-truncate because the worker holds the file open with O_APPEND: its next write lands at the new end.
    Returns True when it rotated.
    """
    try:
        if path.stat().st_size <= max_bytes:
            return False
        for i in range(backups - 1, 0, -1):
            older = path.with_name(f"{path.name}.{i}")
            if older.exists():
                os.replace(older, path.with_name(f"{path.name}.{i + 1}"))
        backup = path.with_name(f"{path.name}.1")
        shutil.copyfile(path, backup)
        os.chmod(backup, FILE_MODE)
        with open(path, "r+b") as fh:
            fh.truncate(0)
    except OSError:
        # A full disk must not break a status poll: the log keeps growing until space returns.
        return False
    return True


def tail_lines(path: Path, n: int = 20, max_bytes: int = 65536) -> tuple[str, ...]:
    """Last ``n`` lines of ``path`` (reads at most ``max_bytes`` from the end)."""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - max_bytes))
            data = fh.read()
    except OSError:
        return ()
    lines = data.decode("utf-8", "replace").splitlines()
    return tuple(lines[-n:])
