"""A ramp step never outlives its bound (amdtop/ramp/bound.py): a step that waits where no deadline reaches, and
ignores its cancellation, ends the ramp aborted within the step's computed length, naming where it waited; the
ramp's loop is closed though the stuck task never ends (a real simulated server over loopback for the discovery)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import pytest

from amdtop.ramp import Ramp, RampConfig, bound, recorder, run_blocking, runner
from tests.unit.simproc import simserver

pytestmark = pytest.mark.timeout(60)
PORT = 18197


async def stuck_in_a_wait_no_deadline_covers(*_args: Any, **_kwargs: Any) -> Any:
    while True:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            continue  # the worst case: the cancellation is swallowed, so nothing may wait for it to end


def test_a_step_stuck_past_its_bound_ends_the_ramp_aborted_naming_where(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(recorder, "recorded_step", stuck_in_a_wait_no_deadline_covers)
    # The step's length is warm-up + window + drain + two scrapes + slack: made short here (about 1.5 s).
    monkeypatch.setattr(runner, "DEADLINE_S", 0.1)
    monkeypatch.setattr(bound, "SLACK_S", 0.0)
    monkeypatch.setattr(bound, "LEFTOVER_GRACE_S", 0.2)
    cfg = RampConfig(url=f"http://127.0.0.1:{PORT}", concurrencies=(1, 2), step_seconds=0.5, warmup_seconds=0.1,
                     request_timeout_s=0.7, refine_points=0, input_len=4, output_len=4, num_prompts=4)  # fmt: skip
    updates: list[str | None] = []
    with simserver(PORT):
        ramp = Ramp(cfg, tmp_path, on_update=lambda r: updates.append(r.aborted))
        result = run_blocking(ramp)
    assert not result.finished and result.steps == []
    assert result.aborted is not None and result.aborted.startswith(
        "the step at concurrency 1 ran past its bound of 1.5 s (waiting in stuck_in_a_wait_no_deadline_covers"
    ), result.aborted
    assert ramp.status == f"aborted: {result.aborted}"
    assert updates and updates[-1] == result.aborted  # published: a viewer's ramp pane shows it
    saved = list((tmp_path / "ramp").glob("*.json"))
    assert saved and result.aborted in saved[0].read_text()


def test_run_fresh_closes_its_loop_though_a_left_task_never_ends() -> None:
    left: list[asyncio.Future[Any]] = []

    async def main() -> str:
        left.append(asyncio.ensure_future(stuck_in_a_wait_no_deadline_covers()))
        await asyncio.sleep(0)
        return "done"

    assert bound.run_fresh(main(), grace_s=0.1) == "done"
    assert left[0].cancelled() or not left[0].done()  # given up on, not awaited without end


def test_stop_landing_as_a_scrape_answers_ends_the_sampling_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    """The hang CI found (a step "waiting in recorded_step, _loop"): stop() cancelled the sampling loop in the instant
    its /metrics answer was in, Python 3.11's asyncio.wait_for returned the answer and dropped the cancellation, the
    loop went back to sleep, and stop() waited for it without end. The order of events here is that instant's,
    exactly: stop() runs while the scrape is one step from returning its answer."""
    stopping: list[asyncio.Task[None]] = []
    recs: list[recorder.StepRecorder] = []

    calls: list[int] = []

    async def answers_as_stop_lands(*_args: Any) -> bytes:
        calls.append(1)
        if len(calls) == 2:  # the first scrape is start()'s (the counters' base), the second the loop's
            stopping.append(asyncio.ensure_future(recs[0].stop()))
            await asyncio.sleep(0)  # stop() runs here and cancels the loop
        return b"vllm:num_requests_running 1\n"

    async def main() -> bool:
        async with httpx.AsyncClient(base_url="http://127.0.0.1:9") as http:  # never reached: the GET is replaced
            recs.append(recorder.StepRecorder(http, interval_s=0.05))
            await recs[0].start()
            await asyncio.sleep(0.3)  # the loop's first scrape (0.05 s in) starts stop()
            assert stopping, "the sampling loop never scraped"
            done, _ = await asyncio.wait(stopping, timeout=5)
            return bool(done)

    monkeypatch.setattr(recorder, "_bounded_get", answers_as_stop_lands)
    assert bound.run_fresh(main(), grace_s=0.1), "stop() waited for a sampling loop whose cancellation was dropped"
