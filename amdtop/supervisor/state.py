"""Per-worker state files (atomic JSON) that let a second amdtop re-attach, plus log rotation and secret masking."""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

_SECRET = re.compile(r"(^HF_TOKEN$|_TOKEN$|_KEY$|SECRET|PASSWORD)", re.IGNORECASE)


def mask_env(env: Mapping[str, str]) -> dict[str, str]:
    """Copy of ``env`` with secret values (HF_TOKEN, *_TOKEN, *_KEY, *SECRET*, *PASSWORD*) replaced by ``***``."""
    return {k: ("***" if _SECRET.search(k) and v else v) for k, v in env.items()}


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

    def with_(self, **changes: Any) -> WorkerRecord:
        """Copy with ``changes``."""
        return replace(self, **changes)


def _to_json(rec: WorkerRecord) -> dict[str, Any]:
    doc = asdict(rec)
    doc["known"] = [list(p) for p in rec.known]
    return doc


def _from_json(doc: Mapping[str, Any]) -> WorkerRecord:
    return WorkerRecord(
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
    )


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
        """The record of ``name``; ``None`` when absent or unreadable (a torn file cannot exist: writes are atomic)."""
        try:
            return _from_json(json.loads(self.path(name).read_text()))
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def save(self, rec: WorkerRecord) -> None:
        """Write ``rec`` atomically (temp file, fsync, rename)."""
        self.dir.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{rec.name}.", suffix=".tmp", dir=self.dir)
        try:
            with os.fdopen(fd, "w") as fh:
                json.dump(_to_json(rec), fh, indent=1)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, self.path(rec.name))
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    @contextmanager
    def lock(self, name: str) -> Iterator[None]:
        """Hold worker ``name`` for a control action.

        flock is per open file, so this serialises actions on one worker across threads and across amdtop processes
        sharing the state dir (TUI + CLI); actions on different workers run in parallel.
        """
        self.dir.mkdir(parents=True, exist_ok=True)
        with open(self.dir / f".{name}.lock", "w") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    def merge(self, seen: WorkerRecord, changed: dict[str, Any]) -> WorkerRecord:
        """Save what a status poll learnt about run ``seen``, unless a control action holds the worker (it owns the
        record then) or another run replaced it; returns ``seen`` with the changes either way."""
        self.dir.mkdir(parents=True, exist_ok=True)
        with open(self.dir / f".{seen.name}.lock", "w") as fh:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return seen.with_(**changed)
            try:
                current = self.load(seen.name)
                if current is None or current.launch_id != seen.launch_id or current.stopping:
                    return seen.with_(**changed)
                merged = current.with_(**changed)
                self.save(merged)
                return merged
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
    except OSError:
        return False
    for i in range(backups - 1, 0, -1):
        older = path.with_name(f"{path.name}.{i}")
        if older.exists():
            os.replace(older, path.with_name(f"{path.name}.{i + 1}"))
    shutil.copyfile(path, path.with_name(f"{path.name}.1"))
    with open(path, "r+b") as fh:
        fh.truncate(0)
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
