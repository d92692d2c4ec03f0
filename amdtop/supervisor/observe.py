"""One look at a worker: processes, state (procfs + /health), engine numbers, binding; learns pids for the sweep."""

from __future__ import annotations

from pathlib import Path

from amdtop.errors import InputError
from amdtop.layout import WorkerLayout, layout_from_args
from amdtop.model import EngineStats, Topology, WorkerState, WorkerStatus
from amdtop.procinfo import read_binding
from amdtop.secrets import mask_log_line
from amdtop.supervisor import procs
from amdtop.supervisor.metrics import Prober
from amdtop.supervisor.profiles import Profile, resolve_numa
from amdtop.supervisor.state import StateStore, WorkerRecord, rotate_log, tail_lines


def profile_numa(profile: Profile, topology: Topology) -> int | None:
    """The node the profile resolves to on ``topology`` (``None``: unpinned or unresolvable)."""
    try:
        return resolve_numa(profile, topology)
    except InputError:
        return None


def profile_layout(profile: Profile | None, n_gpus: int) -> WorkerLayout | None:
    """The DP/TP layout the profile's flags give (``None`` for no profile)."""
    return None if profile is None else layout_from_args(dict(profile.args), n_gpus)


def _asleep(prober: Prober, url: str, engine: EngineStats | None, profile: Profile | None) -> bool:
    """Sleeping per ``vllm:engine_sleep_state``; a vLLM too old for that metric is asked ``GET /is_sleeping`` (only
    when its profile turns dev mode on: without it the endpoint does not exist)."""
    if engine is not None and engine.sleep_level is not None:
        return engine.sleep_level > 0
    if profile is None or dict(profile.env).get("VLLM_SERVER_DEV_MODE") != "1":
        return False
    return prober.is_sleeping(url) is True


def observe(
    name: str,
    profile: Profile | None,
    rec: WorkerRecord | None,
    store: StateStore,
    table: dict[int, procs.ProcStat],
    prober: Prober,
    *,
    topology: Topology,
    demo: bool = False,
    note: str | None = None,
    log_max_bytes: int = 50 * 1024 * 1024,
    log_backups: int = 3,
    spawned: frozenset[int] = frozenset(),
) -> WorkerStatus:
    """Status of worker ``name`` from its launch record, the process ``table`` and a short HTTP probe; ``profile``
    (``None`` when the worker left the file) only fills in what a never-launched worker would have. ``spawned``: the
    launch's leader when this process started it and it still runs (known from spawn, not from its environment)."""
    if rec is None:
        return WorkerStatus(
            name,
            WorkerState.STOPPED,
            profile.gpus if profile else (),
            port=profile.port if profile else None,
            url=profile.url if profile else None,
            numa_node=profile_numa(profile, topology) if profile else None,
            log=str(store.log_path(name)),
            note=note,
            layout=profile_layout(profile, len(profile.gpus) if profile else 0),
        )
    marker = f"{name}:{rec.launch_id}"
    pids = procs.members(
        pgid=rec.pgid, start_ticks=rec.start_ticks, marker=marker, known=rec.known, table=table, spawned=spawned
    )
    leader = rec.pid in pids and table[rec.pid].start_ticks == rec.start_ticks
    engine = None
    lines: tuple[str, ...] = ()
    changed: dict[str, object] = {}
    if rec.stopping and pids:
        state = WorkerState.STOPPING
    elif not leader:
        state = WorkerState.STOPPED if rec.stopped or (rec.stopping and not pids) else WorkerState.CRASHED
    else:
        code = prober.health(rec.url)
        if code == 200:
            state = WorkerState.READY
            if not rec.ready_seen:
                changed["ready_seen"] = True
            engine = prober.scrape(name, rec.url)
            if _asleep(prober, rec.url, engine, profile):
                # Sleep mode frees the weights/KV on purpose: the worker is up, not lost, and not stalled.
                state = WorkerState.ASLEEP
        elif code is not None and code >= 500:
            state = WorkerState.CRASHED
        else:
            state = WorkerState.STARTING
    if state is WorkerState.CRASHED:
        lines = tuple(mask_log_line(line) for line in tail_lines(Path(rec.log), 20))
    if pids:
        known = set(rec.known) | {(p, table[p].start_ticks) for p in pids}
        if known != set(rec.known):
            changed["known"] = tuple(sorted(known))
        # vLLM maps its shared-memory segments while it starts; a ready server's maps (thousands of lines with torch)
        # are read again only when its processes change or it first turns ready.
        if state is not WorkerState.READY or changed:
            shm = set(rec.shm) | procs.mapped_shm(pids)
            if shm != set(rec.shm):
                changed["shm"] = tuple(sorted(shm))
    if changed:
        rec = store.merge(rec, changed)
    rotate_log(Path(rec.log), log_max_bytes, log_backups)
    cpus: set[int] = set()
    mems: set[int] = set()
    numa = rec.numa_node
    if demo and profile is not None:
        # Demo workers run on this host but stand for workers of the simulated node: report the binding they
        # would have there, so NUMA checks against the simulated topology stay meaningful.
        numa = profile_numa(profile, topology)
        if pids and numa is not None:
            cpus.update(next((n.cpus for n in topology.numa_nodes if n.id == numa), ()))
            mems.add(numa)
    else:
        for pid in pids:
            b = read_binding(pid)
            if b is not None:
                cpus.update(b.cpus)
                mems.update(b.mems)
    layout = profile_layout(profile, len(rec.gpus))
    return WorkerStatus(
        name=name,
        state=state,
        gpus=rec.gpus,
        port=rec.port,
        numa_node=numa,
        pid=rec.pid if pids else None,
        pgid=rec.pgid if pids else None,
        url=rec.url,
        pids=tuple(sorted(pids)),
        rank_pids=procs.rank_pids(pids, layout=layout, table=table),
        cpu_affinity=tuple(sorted(cpus)),
        mems_allowed=tuple(sorted(mems)),
        log=rec.log,
        restarts=rec.restarts,
        started_at=rec.started_at if pids else None,
        source="amdtop",
        engine=engine,
        last_log_lines=lines,
        simulated=demo,
        note=note or (rec.rebuilt if pids else None),
        layout=layout,
    )
