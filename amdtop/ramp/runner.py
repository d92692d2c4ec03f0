"""The ramp schedule: discovery, prompts, coarse steps, refinement around the knee, abort rules, saved results."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from amdtop.errors import InputError, os_reason
from amdtop.ramp import bound
from amdtop.ramp.cause import explain
from amdtop.ramp.cmdline import command_line_change, found_server_argv
from amdtop.ramp.goodput import goodput_keys
from amdtop.ramp.knee import default_concurrencies, find_knee, refinement_points
from amdtop.ramp.limits import check_concurrency, fallback_dir
from amdtop.ramp.observe import NodeObserver, WorkerPids, default_worker_pids
from amdtop.ramp.results import RampResult, save
from amdtop.secrets import mask_url
from amdtop.supervisor.bounded_get import DEADLINE_S
from amdtop.supervisor.metrics import bearer

if TYPE_CHECKING:
    from amdtop.ramp.client import LoadSpec


@dataclass(frozen=True, slots=True)
class RampConfig:
    """Settings of one ramp."""

    url: str
    model: str | None = None
    concurrencies: tuple[int, ...] | None = None
    """Coarse steps; ``None`` = 1, 2, 4, ... up to ``max_num_seqs``."""
    max_num_seqs: int = 256
    step_seconds: float = 10.0
    warmup_seconds: float | None = None
    """Per-step warm-up; ``None`` = a quarter of the step (at most 5 s)."""
    input_len: int = 128
    output_len: int = 128
    chat: bool = False
    knee_fraction: float = 0.9
    slo_ttft_ms: float | None = None
    slo_tpot_ms: float | None = None
    refine_points: int = 3
    max_error_rate: float = 0.5
    request_timeout_s: float = 60.0
    num_prompts: int = 64
    seed: int = 0
    goodput: tuple[tuple[str, float], ...] = ()
    """SLOs for ``request_goodput`` per step, as ``vllm bench serve --goodput`` (name, milliseconds)."""
    record: bool = True
    """Record the worker's /metrics, the GPUs and CPU placement per step (the knee's cause needs them)."""
    api_key: str | None = field(default=None, repr=False)
    """Sent as ``Authorization: Bearer`` to a keyed server; never written into the results."""

    def validate(self) -> None:
        """Raise InputError for settings no ramp can run with."""
        if not self.url.startswith(("http://", "https://")):
            raise InputError(f"--url: {self.url!r} is not an http(s) URL; e.g. http://127.0.0.1:8000")
        if self.concurrencies is not None and (not self.concurrencies or min(self.concurrencies) < 1):
            raise InputError("--concurrency: needs positive integers, e.g. 1,2,4,8")
        if self.step_seconds <= 0:
            raise InputError("--step-seconds: must be greater than 0")
        if self.input_len < 1 or self.output_len < 1:
            raise InputError("--input-len/--output-len: must be at least 1")
        if not 0 < self.knee_fraction <= 1:
            raise InputError("knee fraction: must be in (0, 1]")
        if self.max_num_seqs < 1:
            raise InputError("--max-num-seqs: must be at least 1")
        if self.concurrencies:
            check_concurrency("--concurrency", max(self.concurrencies))
        else:
            check_concurrency("--max-num-seqs", self.max_num_seqs)


StepCallback = Callable[[RampResult], None]


class Ramp:
    """Runs a ramp on the caller's event loop; ``abort()`` may be called from any thread."""

    def __init__(
        self,
        cfg: RampConfig,
        state_dir: Path | None = None,
        *,
        on_update: StepCallback | None = None,
        alive: Callable[[], bool] | None = None,
        worker: str | None = None,
        observer: NodeObserver | None = None,
        worker_pids: WorkerPids | None = None,
    ) -> None:
        cfg.validate()
        self.cfg = cfg
        self.state_dir = state_dir
        self.on_update = on_update
        self.alive = alive
        """Optional worker liveness check (the supervisor's view); False stops the ramp."""
        self._stop = threading.Event()
        self._reason: str | None = None
        """Why :meth:`abort` was called, when its caller said (a signal's name)."""
        self.observer = observer
        """The worker's GPUs per step (the TUI's frame or a telemetry backend); ``None`` = no node data."""
        self.worker_pids = worker_pids or default_worker_pids(cfg.url.rstrip("/"))
        # The results are files others may read: no URL password, no API key (mask_url, the one secrets rule).
        settings = {k: v for k, v in asdict(cfg).items() if k != "api_key"}
        settings["url"] = mask_url(cfg.url)
        self.result = RampResult(url=mask_url(cfg.url.rstrip("/")), model=cfg.model or "", settings=settings,
                                 worker=worker)  # fmt: skip
        self.paths: tuple[Path, Path] | None = None
        self.save_error: str | None = None
        """Why the results could not be saved in the state dir (they went to :func:`fallback_dir` instead)."""
        self.status = "starting"
        self._argv: tuple[str, ...] | None = None

    def abort(self, reason: str | None = None) -> None:
        """Stop at the next check (within ~50 ms); partial results are kept and saved, ``aborted`` says ``reason``
        (default "stopped by user")."""
        if reason is not None and self._reason is None:
            self._reason = reason  # set before the flag: whoever sees the flag sees the reason
        self._stop.set()

    def _stopped(self) -> bool:
        return self._stop.is_set() or (self.alive is not None and not self.alive())

    def _publish(self) -> None:
        if self.state_dir is not None:
            # A full disk mid-run must not cost the steps already measured: save them somewhere else and say so.
            try:
                self.paths = save(self.result, self.state_dir)
            except OSError as exc:
                self.save_error = f"cannot write {self.state_dir / 'ramp'} ({os_reason(exc)})"
                try:
                    self.paths = save(self.result, fallback_dir())
                except OSError:
                    self.paths = None
        if self.on_update is not None:
            self.on_update(self.result)

    async def run(self) -> RampResult:
        """Discover, build prompts, run every step; returns the result (also saved after each step)."""
        # The load generator is imported when a ramp runs: the attached viewer and every other command import this
        # module (for RampConfig) but never run a ramp in-process, and httpx alone costs 4.4 MiB RSS.
        import httpx

        from amdtop.ramp.client import LoadSpec
        from amdtop.ramp.prompts import build_prompts, discover

        cfg = self.cfg
        url = cfg.url.rstrip("/")
        self.status = "discovering"
        auth = bearer(cfg.api_key)
        async with httpx.AsyncClient(base_url=url, timeout=httpx.Timeout(10.0, connect=3.0), headers=auth) as c:
            ep = await discover(c, url, cfg.model)
            if ep.max_model_len is not None and cfg.input_len + cfg.output_len + 1 > ep.max_model_len:
                raise InputError(
                    f"--input-len/--output-len: {cfg.input_len}+{cfg.output_len} tokens exceed the model's "
                    f"max_model_len {ep.max_model_len}; use shorter lengths"
                )
            prompts = await build_prompts(c, ep, cfg.input_len, cfg.num_prompts, cfg.seed)
        self.result.model = ep.model
        self.result.settings["tokenizer_prompts"] = ep.tokenizer
        spec = LoadSpec(url, ep.model, prompts, cfg.input_len, cfg.output_len, cfg.chat, cfg.request_timeout_s,
                        api_key=cfg.api_key)  # fmt: skip
        coarse = list(cfg.concurrencies or default_concurrencies(cfg.max_num_seqs))
        warm = cfg.warmup_seconds if cfg.warmup_seconds is not None else min(5.0, cfg.step_seconds / 4)
        done: list[int] = []
        try:
            for conc in coarse:
                if not await self._step(spec, conc, warm, done, refined=False):
                    return self.result
            self._update_knee()
            if self.result.knee is not None and cfg.refine_points > 0:
                for conc in refinement_points(done, self.result.knee.concurrency, cfg.refine_points):
                    if not await self._step(spec, conc, warm, done, refined=True):
                        return self.result
            self.result.finished = True
            self.status = "finished"
        finally:
            self.result.finished_at = time.time()
            self._update_knee()
            self._publish()
        return self.result

    async def _step(self, spec: LoadSpec, conc: int, warm: float, done: list[int], *, refined: bool) -> bool:
        from amdtop.ramp.client import run_step  # imported by run() already; lazy for the reason given there
        from amdtop.ramp.recorder import recorded_step

        cfg = self.cfg
        if self._stopped():
            self.result.aborted = (self._reason or "stopped by user") if self._stop.is_set() else "worker died"
            return False
        self.status = f"step concurrency {conc}"
        drain = min(cfg.request_timeout_s, 2 * cfg.step_seconds + 5)

        def load() -> Any:
            return run_step(
                spec, conc, warmup_s=warm, duration_s=cfg.step_seconds, stop=self._stopped,
                max_error_rate=cfg.max_error_rate, drain_timeout_s=drain,
            )  # fmt: skip

        observed: dict[str, Any] = {}
        # Every wait in a step has its deadline; the sum is the step's length. Past it (plus slack) the step is given
        # up and the ramp ends saying where it waited (bound.py), instead of running on with no end.
        limit = warm + cfg.step_seconds + drain + 2 * DEADLINE_S + bound.SLACK_S
        try:
            if cfg.record:
                (step, reason), observed = await bound.bounded(
                    recorded_step(spec.url, load, warmup_s=warm, duration_s=cfg.step_seconds, observer=self.observer,
                                  worker_pids=self.worker_pids, api_key=cfg.api_key),
                    limit, f"the step at concurrency {conc}",
                )  # fmt: skip
            else:
                step, reason = await bound.bounded(load(), limit, f"the step at concurrency {conc}")
        except bound.StepOverran as exc:
            self.result.aborted = str(exc)
            self.status = f"aborted: {exc}"
            return False  # run() saves and publishes it on its way out
        doc = step.to_json()
        doc["refined"] = refined
        doc.update(goodput_keys(step.results, step.duration, cfg.goodput))
        doc.update(observed)
        if not doc.get("completed"):
            # Zeros here mean "nothing measured", not "zero throughput" (a first token slower than the window).
            doc["note"] = "no request completed in the measurement window"
        self.result.steps.append(doc)
        done.append(conc)
        if reason is None and step.results and step.error_rate > cfg.max_error_rate:
            reason = f"error rate {100 * step.error_rate:.0f}% over {100 * cfg.max_error_rate:.0f}%"
        if reason is not None and reason == "stopped by user" and self.alive is not None and not self.alive():
            reason = "worker died"
        elif reason == "stopped by user" and self._reason is not None:
            reason = self._reason
        self._update_knee()
        self._publish()
        if reason is not None:
            self.result.aborted = reason
            self.status = f"aborted: {reason}"
            return False
        return True

    def _update_knee(self) -> None:
        cfg = self.cfg
        self.result.knee = find_knee(
            self.result.steps, fraction=cfg.knee_fraction, slo_ttft_ms=cfg.slo_ttft_ms, slo_tpot_ms=cfg.slo_tpot_ms
        )
        if self.result.knee is not None:
            verdict = explain(self.result.steps, self.result.knee.concurrency, input_len=cfg.input_len,
                              output_len=cfg.output_len)  # fmt: skip
            self.result.knee = replace(self.result.knee, cause=verdict.cause, evidence=verdict.evidence)
            recommendation = verdict.recommendation()
            argv = self._found_argv()
            if argv:
                # A server amdtop did not start is not restarted by it: the change is shown as its command line.
                recommendation["command_line"] = command_line_change(argv, verdict.changes)
            self.result.recommendation = recommendation

    def _found_argv(self) -> tuple[str, ...] | None:
        """The command line of the server under load when amdtop did not start it (looked up once)."""
        if self._argv is None:
            try:
                self._argv = found_server_argv(self.worker_pids()) or ()
            except OSError:
                self._argv = ()
        return self._argv or None


def run_blocking(ramp: Ramp) -> RampResult:
    """Run a ramp on a fresh event loop in the calling thread (the TUI calls this from a worker thread)."""
    return bound.run_fresh(ramp.run())
