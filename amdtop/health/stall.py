"""Stall verdicts that name the rank: pure functions over what was observed of a worker's rank processes, its engine
counters and its GPUs, plus :class:`StallTracker`, which turns them into ``worker_stalled`` flags with hysteresis.

A TP group moves only as fast as its slowest rank, and neither vLLM's ``/health`` nor its gauges notice a rank that
stopped (the CPU build reads ``num_requests_running`` 0 even while requests stream): the rank's own process state is
the first signal, the flat token counter with requests in flight the second.

- ``rank_dead``: a rank's process is gone or a zombie.
- ``rank_stopped``: state ``T``/``t`` (SIGSTOP, a debugger holding it).
- ``rank_blocked``: state ``D`` (uninterruptible sleep: waiting on the kernel or the GPU driver).
- ``collective_wait``: every rank alive, no token for :data:`STALL_NO_TOKENS_S` while requests are in flight, and
  the ranks (CPU or GPU) busy: they spin in a collective that one of them never joins.
- ``engine_idle``: the same, with every rank idle: nothing is being scheduled.

A data-parallel worker is judged per DP replica, each against its own engine's counters (:func:`replicas`).
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace

from amdtop.health.rankproc import read_ranks
from amdtop.hip_devices import is_partitioned, physical_gpus
from amdtop.model import (
    EngineStats,
    Flag,
    FlagKind,
    NodeSnapshot,
    RankSample,
    Topology,
    WorkerHealth,
    WorkerState,
    WorkerStatus,
)
from amdtop.thresholds import (
    STALL_BUSY_CPU,
    STALL_BUSY_GPU_PCT,
    STALL_CLEAR_AFTER_S,
    STALL_NO_TOKENS_S,
    STALL_RAISE_AFTER_S,
    WORKERS_EVERY_S,
)

OK = WorkerHealth("ok")
DEAD_STATES = frozenset({"gone", "Z", "X", "x"})
STOPPED_STATES = frozenset({"T", "t"})
BLOCKED_STATES = frozenset({"D"})
PROCESS_CAUSES = ("rank_dead", "rank_stopped", "rank_blocked")
"""In order of precedence: a dead rank explains a stopped one's peers, not the other way round."""
_STATE_WORDS = {
    "rank_dead": "is gone",
    "rank_stopped": "is stopped (state T: SIGSTOP or a debugger holds it)",
    "rank_blocked": "is in uninterruptible sleep (state D: waiting on the kernel or the GPU driver)",
}
_FIX = {
    "rank_dead": "the TP group cannot make progress; restart the worker",
    "rank_stopped": "the TP group waits for it; `kill -CONT {pid}` resumes it",
    "rank_blocked": "the TP group waits for it; dump its stack (d, or amdtop workers stacks {worker}) and check dmesg",
}


def _cause_of(state: str) -> str | None:
    if state in DEAD_STATES:
        return "rank_dead"
    if state in STOPPED_STATES:
        return "rank_stopped"
    if state in BLOCKED_STATES:
        return "rank_blocked"
    return None


def describe_exit(status: int) -> str:
    """``killed by SIGKILL`` / ``exit code 1`` from a wait status."""
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        try:
            return f"killed by {signal.Signals(sig).name}"
        except ValueError:
            return f"killed by signal {sig}"
    if os.WIFEXITED(status):
        return f"exit code {os.WEXITSTATUS(status)}"
    return f"wait status {status}"


def instant_health(ranks: Sequence[RankSample], worker: str = "") -> WorkerHealth:
    """The verdict one look at the rank processes gives: the first rank that is dead, else stopped, else blocked."""
    found: dict[str, list[RankSample]] = {}
    for r in ranks:
        cause = _cause_of(r.state)
        if cause is not None:
            found.setdefault(cause, []).append(r)
    for cause in PROCESS_CAUSES:
        bad = found.get(cause)
        if not bad:
            continue
        first = bad[0]
        others = f" (also rank {', '.join(str(r.rank) for r in bad[1:])})" if len(bad) > 1 else ""
        fix = _FIX[cause].format(pid=first.pid, worker=worker or "NAME")
        words = _STATE_WORDS[cause]
        if first.exit_status is not None:
            words = f"died ({describe_exit(first.exit_status)})"
        message = f"rank {first.rank} (pid {first.pid}) {words}{others}; {fix}"
        return WorkerHealth(cause, first.rank, first.pid, message, tuple(_rank_fact(r) for r in ranks))
    return OK


def _rank_fact(r: RankSample, cpu_share: float | None = None) -> str:
    fact = f"rank {r.rank} pid {r.pid} state {r.state}"
    if r.exit_status is not None:
        fact += f" ({describe_exit(r.exit_status)})"
    if r.threads is not None:
        fact += f" threads {r.threads}"
    if cpu_share is not None:
        fact += f" cpu {cpu_share * 100:.0f}% of a core"
    return fact


@dataclass(frozen=True, slots=True)
class Progress:
    """What the engine did between two looks."""

    dt: float
    """Seconds between the looks."""
    tokens: float | None
    """Tokens generated (``None``: the counter is not scraped)."""
    finished: float | None
    """Requests finished."""
    in_flight: float | None
    """Requests in flight at the later look (the larger of the gauges and started - finished)."""


def in_flight(worker: WorkerStatus) -> float | None:
    """Requests the engine holds: the most that vLLM's gauges, its counters (first token seen, not finished: the CPU
    build's gauges read 0 under load) and the API server's open requests (``/load``: those still waiting for a first
    token too) say."""
    e = worker.engine
    if e is None:
        return None
    gauges = (e.running or 0.0) + (e.waiting or 0.0) if e.running is not None or e.waiting is not None else None
    counted = None
    if e.requests_started is not None and e.requests_finished is not None:
        counted = max(0.0, e.requests_started - e.requests_finished)
    known = [x for x in (gauges, counted, e.requests_accepted) if x is not None]
    return max(known) if known else None


def cpu_shares(before: Sequence[RankSample], after: Sequence[RankSample]) -> dict[int, float]:
    """Share of one core each rank used between two looks at it."""
    prev = {(r.rank, r.pid): r for r in before}
    out: dict[int, float] = {}
    for r in after:
        p = prev.get((r.rank, r.pid))
        if p is None or p.cpu_s is None or r.cpu_s is None or r.at <= p.at:
            continue
        out[r.rank] = max(0.0, (r.cpu_s - p.cpu_s) / (r.at - p.at))
    return out


def rank_gpus(worker: WorkerStatus, topology: Topology | None) -> tuple[int, ...]:
    """The physical GPU of each rank (rank r runs on device ``worker.gpus[r]``: a HIP index, which on a partitioned
    node is a partition of some GPU); -1 where the device is unknown."""
    if topology is None or not is_partitioned(topology):
        return worker.gpus
    return tuple(next(iter(physical_gpus(topology, (h,))), -1) for h in worker.gpus)


def gpu_utils(gpus: tuple[int, ...], snap: NodeSnapshot | None) -> dict[int, float]:
    """Utilization of each rank's GPU (``gpus`` from :func:`rank_gpus`) where the backend says."""
    if snap is None:
        return {}
    out: dict[int, float] = {}
    for rank, gpu in enumerate(gpus):
        s = snap.sample(gpu) if gpu >= 0 else None
        if s is not None and s.util_pct is not None:
            out[rank] = s.util_pct
    return out


def progress_verdict(
    worker: WorkerStatus,
    stalled_for: float,
    in_flight_now: float | None,
    cpu: dict[int, float],
    gpu: dict[int, float],
    gpus: tuple[int, ...] | None = None,
) -> WorkerHealth:
    """``collective_wait``/``engine_idle`` once no token came for :data:`STALL_NO_TOKENS_S` with requests in flight
    (``stalled_for`` seconds so far), else ok."""
    if stalled_for < STALL_NO_TOKENS_S or not in_flight_now:
        return OK
    busy = sorted(
        {r for r, c in cpu.items() if c >= STALL_BUSY_CPU} | {r for r, u in gpu.items() if u >= STALL_BUSY_GPU_PCT}
    )
    facts = [f"no generated token for {stalled_for:.0f} s", f"requests in flight: {in_flight_now:.0f}"]
    facts += [f"rank {r} cpu {c * 100:.0f}% of a core" for r, c in sorted(cpu.items())]
    on = worker.gpus if gpus is None else gpus
    facts += [f"rank {r} GPU {on[r]} util {u:.0f}%" for r, u in sorted(gpu.items())]
    if busy:
        idle = sorted((set(cpu) | set(gpu)) - set(busy))
        rank = idle[0] if idle else None
        names = ", ".join(map(str, busy))
        laggard = f"; rank {rank} is idle: the one the others wait for" if rank is not None else ""
        pid = dict(worker.rank_pids).get(rank) if rank is not None else None
        message = (
            f"no token for {stalled_for:.0f} s with {in_flight_now:.0f} request(s) in flight while rank(s) {names} "
            f"spin: the ranks wait in a collective{laggard}; dump their stacks (d, or amdtop workers stacks "
            f"{worker.name})"
        )
        return WorkerHealth("collective_wait", rank, pid, message, tuple(facts))
    if not cpu and not gpu:
        message = (
            f"no token for {stalled_for:.0f} s with {in_flight_now:.0f} request(s) in flight; the ranks' activity "
            f"is unknown"
        )
        return WorkerHealth("unknown", None, None, message, tuple(facts))
    message = (
        f"no token for {stalled_for:.0f} s with {in_flight_now:.0f} request(s) in flight and every rank idle: the "
        f"engine schedules nothing; dump the stacks (d, or amdtop workers stacks {worker.name})"
    )
    return WorkerHealth("engine_idle", None, None, message, tuple(facts))


@dataclass
class _Track:
    """What :class:`StallTracker` remembers of one worker."""

    ranks: tuple[RankSample, ...] = ()
    tokens: float | None = None
    finished: float | None = None
    moved_at: float | None = None
    """Monotonic time the engine last made progress (tokens or finished requests), or was first seen."""
    cause: str | None = None
    cause_since: float | None = None
    cause_since_wall: float | None = None
    ok_since: float | None = None
    raised: WorkerHealth | None = None
    raised_since_wall: float | None = None
    cpu: dict[int, float] | None = None
    in_flight: float | None = None


class StallTracker:
    """Per-worker memory across ticks: judges each worker's latest look, raises ``worker_stalled`` when a stall
    verdict held :data:`STALL_RAISE_AFTER_S` and clears it after :data:`STALL_CLEAR_AFTER_S` of health."""

    def __init__(
        self,
        *,
        raise_after_s: float = STALL_RAISE_AFTER_S,
        clear_after_s: float = STALL_CLEAR_AFTER_S,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        reader: Callable[[Iterable[tuple[int, int]]], tuple[RankSample, ...]] = read_ranks,
    ) -> None:
        """``clock`` times the hysteresis; ``wall`` stamps ``since``; ``reader`` reads the ranks of workers that come
        without a look at them (vLLM servers discovered running, not launched by amdtop)."""
        self.raise_after_s = raise_after_s
        self.clear_after_s = clear_after_s
        self._clock = clock
        self._wall = wall
        self._reader = reader
        self._tracks: dict[str, _Track] = {}
        self._read: dict[str, tuple[float, tuple[RankSample, ...]]] = {}

    def judge(self, workers: Sequence[WorkerStatus], snap: NodeSnapshot | None = None) -> list[Flag]:
        """``worker_stalled`` flags for ``workers`` now (one per stalled worker; per stalled replica of a DP worker)."""
        now = self._clock()
        flags: list[Flag] = []
        live, tracked = set(), set()
        for w in workers:
            if w.state not in (WorkerState.READY, WorkerState.STARTING):  # asleep, stopped, crashed: never judged
                continue
            if not w.ranks and w.rank_pids:
                w = replace(w, ranks=self._look(w, now))
            if not w.ranks:
                continue
            live.add(w.name)
            gpus = rank_gpus(w, None if snap is None else snap.topology)
            split = replicas(w, gpus)
            for key, part, on, dp_rank in split or ((w.name, w, gpus, None),):
                tracked.add(key)
                track = self._tracks.setdefault(key, _Track())
                verdict = self._verdict(part, track, now, snap, on)
                flag = self._hysteresis(part, track, verdict, now, on, dp_rank)
                if flag is not None:
                    flags.append(flag)
        for name in set(self._tracks) - tracked:
            del self._tracks[name]
        for name in set(self._read) - live:
            del self._read[name]
        return flags

    def _look(self, w: WorkerStatus, now: float) -> tuple[RankSample, ...]:
        """The ranks of a worker whose status carries none, read at the supervisor's cadence."""
        held = self._read.get(w.name)
        pids = tuple((r.rank, r.pid) for r in held[1]) if held else ()
        if held is None or now - held[0] >= WORKERS_EVERY_S or pids != w.rank_pids:
            held = self._read[w.name] = (now, self._reader(w.rank_pids))
        return held[1]

    def _verdict(
        self, w: WorkerStatus, track: _Track, now: float, snap: NodeSnapshot | None, gpus: tuple[int, ...]
    ) -> WorkerHealth:
        if w.ranks != track.ranks:  # a new look at the processes (the supervisor refreshes every 2 s)
            if track.ranks:
                track.cpu = cpu_shares(track.ranks, w.ranks)
            track.ranks = w.ranks
            e = w.engine
            tokens = None if e is None else e.gen_tokens_total
            finished = None if e is None else e.requests_finished
            busy_before = track.in_flight
            track.in_flight = in_flight(w)
            # Progress, or the first request after an idle spell: the clock of "no token" starts again.
            if track.moved_at is None or tokens != track.tokens or finished != track.finished or not busy_before:
                track.moved_at = now
            track.tokens, track.finished = tokens, finished
        instant = w.health if w.health is not None else instant_health(w.ranks, w.name)
        if instant.verdict != "ok":
            return instant
        if track.tokens is None or track.moved_at is None:
            return OK
        return progress_verdict(w, now - track.moved_at, track.in_flight, track.cpu or {}, gpu_utils(gpus, snap), gpus)

    def _hysteresis(
        self,
        w: WorkerStatus,
        track: _Track,
        verdict: WorkerHealth,
        now: float,
        gpus: tuple[int, ...],
        dp_rank: int | None = None,
    ) -> Flag | None:
        if verdict.verdict == "ok":
            track.cause = track.cause_since = track.cause_since_wall = None
            if track.ok_since is None:
                track.ok_since = now
            # A process cause is a state read from /proc, not an inference: once the look shows the rank running
            # again the flag goes at once (the raise delay already passed over py-spy's momentary stops). Kept for
            # the clear time, it named a resumed rank "stopped, state T" for seconds after SIGCONT (the quiet step's
            # failure in CI). A progress stall clears only after the clear time of health (no flapping).
            if track.raised is not None and (
                track.raised.verdict in PROCESS_CAUSES or now - track.ok_since >= self.clear_after_s
            ):
                track.raised = track.raised_since_wall = None
        else:
            track.ok_since = None
            if verdict.verdict != track.cause:
                since_wall = self._wall()
                if verdict.verdict not in PROCESS_CAUSES and track.moved_at is not None:
                    since_wall -= now - track.moved_at  # a progress stall began with the last token, not the verdict
                track.cause, track.cause_since, track.cause_since_wall = verdict.verdict, now, since_wall
            assert track.cause_since is not None
            if track.raised is not None:
                # Raised already: the message follows the latest look at once (``since`` stays the first). Waiting
                # for the new cause to hold would keep a resumed rank named "stopped" while the verdicts after it
                # alternate (collective_wait / engine_idle as the ranks' CPU crosses the busy line: seen for 30 s
                # after SIGCONT on real vLLM).
                track.raised = verdict
            elif now - track.cause_since >= self.raise_after_s:
                track.raised_since_wall = track.cause_since_wall
                track.raised = verdict
        if track.raised is None:
            return None
        return stalled_flag(w, track.raised, track.raised_since_wall, gpus, dp_rank)


def stalled_flag(
    w: WorkerStatus,
    health: WorkerHealth,
    since: float | None,
    rank_gpus: tuple[int, ...] | None = None,
    dp_rank: int | None = None,
) -> Flag:
    """The ``worker_stalled`` flag of ``health`` (keys of the contract: worker, rank, pid, cause, since, message,
    evidence; ``dp_rank`` added where one DP replica of the worker was judged); ``gpus`` is the named rank's physical
    GPU."""
    on = w.gpus if rank_gpus is None else rank_gpus
    rank = health.rank
    gpus = (on[rank],) if rank is not None and 0 <= rank < len(on) and on[rank] >= 0 else ()
    who = w.name if dp_rank is None else f"{w.name}/dp{dp_rank} (DP replica {dp_rank})"
    extra: tuple[tuple[str, object], ...] = (
        ("rank", health.rank),
        ("pid", health.pid),
        ("cause", health.verdict),
        ("since", None if since is None else round(since, 3)),
        ("evidence", health.evidence),
    )
    if dp_rank is not None:
        extra += (("dp_rank", dp_rank),)
    return Flag(FlagKind.WORKER_STALLED, f"{who}: {health.message}", worker=w.name, gpus=gpus, extra=extra)


def replicas(
    w: WorkerStatus, gpus: tuple[int, ...]
) -> tuple[tuple[str, WorkerStatus, tuple[int, ...], int], ...] | None:
    """A data-parallel worker cut into its DP replicas, each judged on its own: ``(track key, the worker as that
    replica alone, gpus of its ranks (-1 elsewhere), dp_rank)``; ``None`` where the worker is judged whole.

    Each replica is its own engine with its own ``engine="N"`` counters, so replica 1 hung while replica 0 streams
    leaves the worker's summed token counter moving: judged whole, the hang is never seen. Ranks are global (a rank's
    position in the worker's device list, :func:`amdtop.supervisor.procs.rank_pids`), so replica ``d``'s are
    ``first_rank .. first_rank + len(gpus) - 1`` of its TP groups (every pipeline stage of one engine together).

    Judged whole: a plain worker (no layout, dp=1); a worker whose page lacks per-engine counters for a replica; and a
    MoE worker under DP (``busy_when_idle``). There an idle replica runs dummy batches by design, so a busy GPU on a
    replica with no requests of its own is no collective wait, and the experts' all-to-alls keep every replica in
    step: one replica cannot stall while another streams, and the worker-wide counters are the right measure."""
    layout = w.layout
    if layout is None or layout.dp <= 1 or layout.busy_when_idle or w.engine is None:
        return None
    members: dict[int, set[int]] = {}
    for g in w.tp_groups():
        members.setdefault(g.dp_rank, set()).update(range(g.first_rank, g.first_rank + len(g.gpus)))
    if len(members) < 2:  # devices unknown (a discovered server, the CPU build): the ranks still follow the layout
        size = layout.world_size
        members = {d: set(range(d * size, (d + 1) * size)) for d in range(layout.dp)}
    samples = {e.engine: e for e in w.engine.engines}
    if any(str(d) not in samples or samples[str(d)].gen_tokens_total is None for d in members):
        return None
    out: list[tuple[str, WorkerStatus, tuple[int, ...], int]] = []
    for d, ranks in sorted(members.items()):
        e = samples[str(d)]
        engine = EngineStats(running=e.running, waiting=e.waiting, gen_tokens_total=e.gen_tokens_total,
                             requests_finished=e.requests_finished, requests_started=e.requests_started)  # fmt: skip
        health = w.health
        if health is not None and health.verdict != "ok" and health.rank not in ranks:
            health = None  # another replica's verdict (or one naming no rank): this replica's own ranks decide
        part = replace(
            w,
            ranks=tuple(r for r in w.ranks if r.rank in ranks),
            rank_pids=tuple(rp for rp in w.rank_pids if rp[0] in ranks),
            engine=engine,
            health=health,
        )
        if not part.ranks:  # none of its ranks found yet: nothing to judge it by (as for a whole worker)
            continue
        on = tuple(g if r in ranks else -1 for r, g in enumerate(gpus))
        out.append((f"{w.name}/dp{d}", part, on, d))
    return tuple(out)


def health_json(health: WorkerHealth | None) -> dict[str, object]:
    """``health`` of ``workers status --json``: ``{"verdict": "ok"}`` or the cause with its rank, pid and message."""
    if health is None or health.verdict == "ok":
        return {"verdict": "ok"}
    return {
        "verdict": health.verdict,
        "rank": health.rank,
        "pid": health.pid,
        "message": health.message,
        "evidence": list(health.evidence),
    }
