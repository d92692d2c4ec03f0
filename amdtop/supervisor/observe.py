"""One look at a worker: processes, state (procfs + /health), engine numbers, binding; learns pids for the sweep."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

from amdtop.errors import InputError
from amdtop.health.rankproc import read_rank, sample_of, settle_blocked
from amdtop.health.stall import describe_exit, instant_health
from amdtop.layout import WorkerLayout, layout_from_args
from amdtop.logread.crashlog import RankDeath, crash_summary, rank_death
from amdtop.model import EngineStats, RankSample, Topology, WorkerHealth, WorkerState, WorkerStatus
from amdtop.procinfo import read_binding
from amdtop.secrets import mask_log_line
from amdtop.supervisor import procs
from amdtop.supervisor.launchspec import tracks_load
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
    if profile is None:
        return None
    return profile.layout if profile.engine == "sglang" else layout_from_args(dict(profile.args), n_gpus)


def sglang_ready(prober: Prober, url: str) -> int | None:
    """An SGLang server's readiness: ``GET /model_info`` (``/get_model_info`` before 0.5.2x, deprecated since).

    Not ``/health``: SGLang's generates one token when idle and answers no sooner than a second (sglang 0.5.23
    ``http_server.py`` ``health_generate``: ``await asyncio.sleep(1)`` before its first check), past the prober's
    timeout, and 503 while the server warms up, which the vLLM path reads as a crash."""
    code = prober.status(url, "/model_info")
    return prober.status(url, "/get_model_info") if code == 404 else code


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
    launch's leader when this process started it and it still runs (known from spawn, not from its environment).

    Each rank's (pid, start) and how a dead rank ended are kept in the launch record: a rank whose process vanished
    is still named (read as ``gone``), and the signal that killed it outlives the zombie vLLM reaps."""
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
            engine_kind=profile.engine if profile else "vllm",
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
        if profile is not None and profile.engine == "sglang":
            code = sglang_ready(prober, rec.url)
        else:
            code = prober.health(rec.url)
        if code == 200:
            state = WorkerState.READY
            if not rec.ready_seen:
                changed["ready_seen"] = True
            engine = prober.scrape(name, rec.url)
            if engine is not None and profile is not None and tracks_load(profile):
                # launched with --enable-server-load-tracking (launchspec): /load counts what the counters cannot
                engine = replace(engine, requests_accepted=prober.load(rec.url))
            if _asleep(prober, rec.url, engine, profile):
                # Sleep mode frees the weights/KV on purpose: the worker is up, not lost, and not stalled.
                state = WorkerState.ASLEEP
        elif code is not None and code >= 500:
            state = WorkerState.CRASHED
        else:
            state = WorkerState.STARTING
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
    layout = profile_layout(profile, len(rec.gpus))
    rank_pids = procs.rank_pids(pids, layout=layout, table=table)
    ranks: tuple[RankSample, ...] = ()
    seen = rec.ranks
    if state is not WorkerState.STOPPED:  # a stopped run's ranks are gone on purpose: nothing to read or judge
        ranks, seen = _look_at_ranks(rank_pids, table, rec.ranks)
    if seen != rec.ranks:
        changed["ranks"] = seen
    exits = dict(rec.rank_exits) | {r.rank: r.exit_status for r in ranks if r.exit_status is not None}
    if tuple(sorted(exits.items())) != rec.rank_exits:
        changed["rank_exits"] = tuple(sorted(exits.items()))
    if changed:
        rec = store.merge(rec, changed)
    if state is WorkerState.STARTING and rec.ready_seen and _rank_died(ranks, exits):
        # A run that was ready once and lost a rank is not starting again: its API server lives on while vLLM shuts
        # down, and its /health then refuses or times out (a second look, e.g. `workers status` in another process,
        # read the SIGSEGV'd TP=2 worker as starting).
        state = WorkerState.CRASHED
    error: str | None = None
    death: RankDeath | None = None
    if state is WorkerState.CRASHED:
        lines, error, death = _crash_lines(Path(rec.log))
        lines = tuple(mask_log_line(line) for line in lines)  # the worker's own echo of its argv holds keys
        error = None if error is None else mask_log_line(error)
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
    health = _health(name, state, ranks, death, rec)
    if death is not None and health is not None and health.rank == death.rank:
        error = health.message  # the rank and how it ended, with vLLM's line
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
        rank_pids=rank_pids,
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
        ranks=ranks,
        health=health,
        error_line=error,
        # The profile says which engine it launches; a worker that left the file is known by its page.
        engine_kind=profile.engine if profile is not None else (engine.kind if engine is not None else "vllm"),
    )


LAUNCH_LINE = "=== amdtop launch "


def _crash_lines(log: Path) -> tuple[tuple[str, ...], str | None, RankDeath | None]:
    """The last 20 lines of the run that crashed, its error line and the rank its log says died (both looked for in
    its last 400 lines: a traceback and exit noise can push the line that matters far above the end)."""
    lines = tail_lines(log, 400, max_bytes=256 * 1024)
    start = max((i for i, line in enumerate(lines) if line.startswith(LAUNCH_LINE)), default=-1)
    run = lines[start + 1 :]  # only this run's lines: the log holds earlier runs above its launch line
    return run[-20:], crash_summary(run), rank_death(run)


def _look_at_ranks(
    rank_pids: tuple[tuple[int, int], ...], table: dict[int, procs.ProcStat], seen: tuple[tuple[int, int, int], ...]
) -> tuple[tuple[RankSample, ...], tuple[tuple[int, int, int], ...]]:
    """Each rank's process as the status pass's table read it, and the ranks seen so far (rank, pid, start). A rank
    seen before whose process left the table (gone, or a zombie: the table holds live processes only) is read once
    more to tell which."""
    now = time.monotonic()
    book = {rank: (pid, start) for rank, pid, start in seen}
    for rank, pid in rank_pids:
        book[rank] = (pid, table[pid].start_ticks)
    out = []
    for rank, (pid, start) in sorted(book.items()):
        st = table.get(pid)
        if st is not None and st.start_ticks == start:
            out.append(sample_of(rank, pid, st.state, st.cpu_ticks, st.threads, now))
        else:
            out.append(read_rank(rank, pid, start))
    starts = {rank: start for rank, (_pid, start) in book.items()}  # a rank in D is read again under the same check
    seen_now = tuple((rank, pid, start) for rank, (pid, start) in sorted(book.items()))
    return settle_blocked(tuple(out), starts=starts), seen_now


def _rank_died(ranks: tuple[RankSample, ...], exits: dict[int, int]) -> bool:
    """A rank process ended: its exit was seen (a zombie's status, kept in the record) or its process is gone."""
    return bool(exits) or any(r.state in ("gone", "Z", "X") for r in ranks)


def _health(
    name: str, state: WorkerState, ranks: tuple[RankSample, ...], death: RankDeath | None, rec: WorkerRecord
) -> WorkerHealth | None:
    exits = dict(rec.rank_exits)
    pids = {rank: pid for rank, pid, _start in rec.ranks}
    if state is WorkerState.CRASHED:
        if death is not None:
            # vLLM may log the exit code before it has collected it ("exit code: None"): the zombie said how.
            how = death.describe()
            if death.exit_code is None and death.rank in exits:
                how = f"rank {death.rank} died ({describe_exit(exits[death.rank])})"
            message = f"{how}; the worker crashed: {death.line.strip()}"
            evidence = (death.line.strip(),) if death.signal_line is None else (death.signal_line, death.line.strip())
            return WorkerHealth("rank_dead", death.rank, pids.get(death.rank), message, evidence)
        if exits:
            rank = min(exits)
            message = f"rank {rank} died ({describe_exit(exits[rank])}); the worker crashed"
            return WorkerHealth("rank_dead", rank, pids.get(rank), message)
        if ranks:
            return instant_health(ranks, name)
        return None
    if state in (WorkerState.READY, WorkerState.STARTING) and ranks:
        return instant_health(ranks, name)
    return None
