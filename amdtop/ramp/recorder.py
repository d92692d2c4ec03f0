"""What the worker did during one ramp step: /metrics deltas and levels, GPU samples, CPU placement.

The recorder runs beside the load generator on the same event loop: one ``/metrics`` scrape and one node observation
(:class:`~amdtop.ramp.observe.NodeObserver`, over the node runtime's frames) every ``interval_s``, levels kept only
inside the measurement window, counters differenced over the whole step.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx
import psutil

from amdtop.cpulist import format_cpulist
from amdtop.ramp.observe import GpuObservation, NodeObserver, WorkerPids
from amdtop.supervisor.bounded_get import DEADLINE_S, MAX_BODY, TooLarge
from amdtop.supervisor.metrics import bearer
from amdtop.vllm_metric_names import histogram_names, names
from amdtop.vllm_scrape import Scrape

if sys.version_info >= (3, 11):
    from asyncio import timeout as deadline
else:  # the same context manager, from the package asyncio took it from
    from async_timeout import timeout as deadline

KV_USAGE = names("kv_cache_usage")
"""Names of every vLLM release, newest first (amdtop/vllm_metric_names.py)."""
PREEMPTIONS = names("preemptions")
PROMPT_TOKENS = names("prompt_tokens")
GEN_TOKENS = names("generation_tokens")
QUEUE_SUM = histogram_names("queue_time", "_sum")
QUEUE_COUNT = histogram_names("queue_time", "_count")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


async def _bounded_get(http: httpx.AsyncClient, path: str) -> bytes | None:
    """The body of ``GET path`` when it answers 200 within :data:`~amdtop.supervisor.bounded_get.MAX_BODY` bytes
    (TooLarge past it: a worker's page is untrusted input), ``None`` for another status. The caller bounds the time."""
    async with http.stream("GET", path) as resp:
        if resp.status_code != 200:
            return None
        length = resp.headers.get("content-length", "").strip()
        if length.isdecimal() and int(length[:12]) > MAX_BODY:
            raise TooLarge(f"{path}: {length[:12]} bytes")
        body = bytearray()
        async for chunk in resp.aiter_bytes():  # decoded (the server may gzip): the cap is on what is parsed
            body += chunk
            if len(body) > MAX_BODY:
                raise TooLarge(f"{path}: over {MAX_BODY} bytes")
        return bytes(body)


def first(samples: dict[str, float], names: Sequence[str]) -> float | None:
    """The first of ``names`` present in ``samples``."""
    for n in names:
        if n in samples:
            return samples[n]
    return None


def cache_config(text: str) -> dict[str, str]:
    """The labels of ``vllm:cache_config_info`` (block size, KV size in tokens and blocks, memory utilization)."""
    for line in text.splitlines():
        if line.startswith("vllm:cache_config_info{"):
            return {k: v for k, v in _LABEL.findall(line[: line.rfind("}")])}
    return {}


def kv_capacity_tokens(cfg: dict[str, str]) -> int | None:
    """KV cache size in tokens from the cache config labels (``kv_cache_size_tokens`` or blocks x block size)."""
    # A label is the server's text: "inf" (OverflowError) or "nan" (ValueError) is no size.
    with contextlib.suppress(ValueError, KeyError, OverflowError):
        return int(float(cfg["kv_cache_size_tokens"]))
    with contextlib.suppress(ValueError, KeyError, OverflowError):
        return int(float(cfg["num_gpu_blocks"])) * int(float(cfg["block_size"]))
    return None


@dataclass(slots=True)
class _Levels:
    kv: list[float] = field(default_factory=list)
    running: list[float] = field(default_factory=list)
    waiting: list[float] = field(default_factory=list)
    util: dict[int, list[float]] = field(default_factory=dict)
    group_of: dict[int, int] = field(default_factory=dict)
    power_frac: list[float] = field(default_factory=list)
    throttled: dict[int, int] = field(default_factory=dict)
    reasons: set[str] = field(default_factory=set)
    xgmi: list[float] = field(default_factory=list)
    node_samples: int = 0
    worker_cpus_busy: set[int] = field(default_factory=set)
    client_cpus: set[int] = field(default_factory=set)


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


class StepRecorder:
    """Records one step; ``await start()`` before the load, ``await stop()`` after it, then :meth:`result`."""

    def __init__(
        self,
        client: httpx.AsyncClient,
        *,
        observer: NodeObserver | None = None,
        worker_pids: Sequence[int] = (),
        interval_s: float = 0.5,
        window: tuple[float, float] | None = None,
    ) -> None:
        """``window`` = (start, end) of the measurement window in ``time.perf_counter`` seconds."""
        self._http = client
        self._observer = observer
        self._interval = interval_s
        self._window = window
        self._levels = _Levels()
        self._first: Scrape | None = None
        self._last: Scrape | None = None
        self._cache: dict[str, str] = {}
        self._task: asyncio.Task[None] | None = None
        self._procs: list[psutil.Process] = []
        for pid in worker_pids:
            with contextlib.suppress(psutil.Error):
                self._procs.append(psutil.Process(pid))
        self._me = psutil.Process()
        self._cpu0: dict[int, float] = {}
        self._t0 = 0.0
        self.metrics_ok = False

    async def _scrape(self) -> Scrape | None:
        # Not asyncio.wait_for: before Python 3.12 it runs the GET in a task of its own and, when the sampling loop
        # is cancelled in the instant that task's answer is in, returns the answer and drops the cancellation
        # (cpython gh-86296). stop() then waited for a loop that had gone back to sleep: CI's ramp hung, "waiting in
        # recorded_step (recorder.py:345), _loop (recorder.py:162)". A deadline in this task cannot drop it.
        try:
            async with deadline(DEADLINE_S):
                got = await _bounded_get(self._http, "/metrics")
        except (httpx.HTTPError, asyncio.TimeoutError, TooLarge):  # asyncio's own class before 3.11
            return None
        if got is None:
            return None
        text = got.decode("utf-8", "replace")
        if not self._cache:
            self._cache = cache_config(text)
        self.metrics_ok = True
        return Scrape.parse(text)

    def _proc_cpu(self) -> dict[int, float]:
        out: dict[int, float] = {}
        for p in self._procs:
            with contextlib.suppress(psutil.Error):
                t = p.cpu_times()
                out[p.pid] = t.user + t.system
        return out

    async def start(self) -> None:
        """First scrape (the counters' base) and the sampling loop."""
        self._first = await self._scrape()
        self._cpu0 = self._proc_cpu()
        self._t0 = time.perf_counter()
        self._task = asyncio.ensure_future(self._loop())

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self._interval)
            now = time.perf_counter()
            inside = self._window is None or self._window[0] <= now <= self._window[1]
            samples = await self._scrape()
            if samples is not None:
                self._last = samples
            if not inside:
                continue
            lv = self._levels
            if samples is not None:
                # KV usage is a per-engine fraction: the fullest engine, never a sum over DP replicas.
                for value, dest in ((samples.highest("kv_cache_usage"), lv.kv),
                                    (samples.total("running"), lv.running), (samples.total("waiting"), lv.waiting)):  # fmt: skip
                    if value is not None:
                        dest.append(value)
            self._placement()
            if self._observer is not None:
                try:
                    gpus = await asyncio.to_thread(self._observer)
                except Exception:  # a telemetry hiccup must not end the ramp; the step just has fewer samples
                    gpus = ()
                self._add_gpus(gpus)

    def _placement(self) -> None:
        # Which cores the worker's busy processes and the client actually ran on at this moment.
        lv = self._levels
        for p in self._procs:
            with contextlib.suppress(psutil.Error):
                if p.status() == psutil.STATUS_RUNNING:
                    lv.worker_cpus_busy.add(p.cpu_num())
        with contextlib.suppress(psutil.Error, AttributeError):
            lv.client_cpus.add(self._me.cpu_num())

    def _add_gpus(self, gpus: Sequence[GpuObservation]) -> None:
        lv = self._levels
        if not gpus:
            return
        lv.node_samples += 1
        xgmi = 0.0
        seen_xgmi = False
        for g in gpus:
            if g.util_pct is not None:
                lv.util.setdefault(g.index, []).append(g.util_pct)
            if g.tp_group is not None:
                lv.group_of[g.index] = g.tp_group
            if g.power_w is not None and g.power_cap_w:
                lv.power_frac.append(g.power_w / g.power_cap_w)
            if g.throttled is not None:
                lv.throttled[g.index] = lv.throttled.get(g.index, 0) + int(g.throttled)
                if g.throttled and g.throttle_reason:
                    lv.reasons.add(g.throttle_reason)
            if g.xgmi_bytes_per_s is not None:
                xgmi += g.xgmi_bytes_per_s
                seen_xgmi = True
        if seen_xgmi:
            lv.xgmi.append(xgmi)

    async def stop(self) -> None:
        """End the sampling loop and take the closing scrape."""
        task, self._task = self._task, None
        if task is not None:
            # Cancelled until it ends: a cancellation swallowed anywhere inside (a library's own wait, as wait_for's
            # was) costs one more round here, never a step that waits for ever.
            while not task.done():
                task.cancel()
                await asyncio.wait({task}, timeout=DEADLINE_S)
            if not task.cancelled():
                task.result()  # the loop's own failure, raised as awaiting it did
        last = await self._scrape()
        if last is not None:
            self._last = last

    def result(self) -> dict[str, Any]:
        """The step's recorded keys (flat, so the CSV keeps one row per step); ``None`` where nothing was seen."""
        lv = self._levels
        out: dict[str, Any] = {"server_metrics": self.metrics_ok}
        a, b = self._first, self._last
        # vllm or sglang (the page tells): the knee's advice names that engine's flags
        out["engine_kind"] = b.engine_kind if b is not None else None

        def delta(key: str, suffix: str = "") -> float | None:
            if a is None or b is None:
                return None
            x, y = a.total(key, suffix), b.total(key, suffix)
            if x is None or y is None or y < x:  # absent, or the server restarted
                return None
            return y - x

        out["kv_cache_usage_max"] = max(lv.kv) if lv.kv else None
        out["kv_cache_usage_mean"] = _mean(lv.kv)
        out["num_preemptions"] = delta("preemptions")
        out["running_mean"] = _mean(lv.running)
        out["running_max"] = max(lv.running) if lv.running else None
        out["waiting_mean"] = _mean(lv.waiting)
        out["waiting_max"] = max(lv.waiting) if lv.waiting else None
        out["server_prompt_tokens"] = delta("prompt_tokens")
        out["server_generation_tokens"] = delta("generation_tokens")
        qs, qc = delta("queue_time", "_sum"), delta("queue_time", "_count")
        out["mean_queue_time_ms"] = 1000.0 * qs / qc if qs is not None and qc else None
        out["kv_cache_tokens"] = kv_capacity_tokens(self._cache)
        if out["kv_cache_tokens"] is None and b is not None and (pool := b.by_name("sglang:max_total_num_tokens")):
            out["kv_cache_tokens"] = int(min(pool.values()))  # SGLang's token pool per DP rank (page size 1)
        block = self._cache.get("block_size", "")
        out["block_size"] = int(block) if block.isdecimal() and len(block) <= 9 else None  # "²" is a digit
        out["gpu_memory_utilization"] = _float(self._cache.get("gpu_memory_utilization"))
        means = {i: sum(v) / len(v) for i, v in sorted(lv.util.items()) if v}
        out["gpu_util_pct"] = {str(i): round(m, 1) for i, m in means.items()} or None
        out["gpu_util_mean"] = _mean(list(means.values()))
        out.update(_util_spread(means, lv.group_of))
        out["power_frac_max"] = max(lv.power_frac) if lv.power_frac else None
        if lv.throttled and lv.node_samples:
            out["throttled_frac"] = max(lv.throttled.values()) / lv.node_samples
            out["throttle_reasons"] = ",".join(sorted(lv.reasons)) or None
        else:
            out["throttled_frac"] = None
            out["throttle_reasons"] = None
        out["xgmi_gbps"] = sum(lv.xgmi) / len(lv.xgmi) / 1e9 if lv.xgmi else None
        wall = time.perf_counter() - self._t0 if self._t0 else 0.0
        cpu1 = self._proc_cpu()
        used = sum(cpu1[p] - self._cpu0.get(p, cpu1[p]) for p in cpu1)
        out["worker_cpu_pct"] = 100.0 * used / wall if self._procs and wall > 0 else None
        out.update(self._sharing())
        return out

    def _sharing(self) -> dict[str, Any]:
        mine: set[int] = set()
        with contextlib.suppress(psutil.Error, AttributeError):
            mine = set(self._me.cpu_affinity() or [])
        theirs: set[int] = set()
        for p in self._procs:
            with contextlib.suppress(psutil.Error, AttributeError):
                theirs |= set(p.cpu_affinity() or [])
        if not self._procs:
            return {"client_shares_cores": None, "client_shared_cpus": None}
        allowed = mine & theirs
        met = self._levels.worker_cpus_busy & self._levels.client_cpus
        shared = sorted(met or allowed)
        return {"client_shares_cores": bool(allowed), "client_shared_cpus": format_cpulist(shared) if shared else None}


def _util_spread(means: dict[int, float], group_of: dict[int, int]) -> dict[str, Any]:
    """Utilization spread inside a TP group (the worst group of a data-parallel worker; replicas are load-balanced
    apart, so a difference between them is no TP evidence) and the GPU lowest in that group."""
    groups: dict[int, dict[int, float]] = {}
    for gpu, mean in means.items():
        groups.setdefault(group_of.get(gpu, 0), {})[gpu] = mean
    spreads = {i: max(g.values()) - min(g.values()) for i, g in groups.items() if len(g) > 1}
    if not spreads:
        return {"gpu_util_spread": None, "gpu_util_min_gpu": None, "gpu_util_spread_by_group": None}
    worst = max(spreads, key=lambda i: spreads[i])
    return {
        "gpu_util_spread": spreads[worst],
        "gpu_util_min_gpu": min(groups[worst], key=lambda gpu: groups[worst][gpu]),
        "gpu_util_spread_by_group": {str(i): round(v, 1) for i, v in sorted(spreads.items())} if group_of else None,
    }


def _float(text: str | None) -> float | None:
    try:
        return float(text) if text is not None else None
    except ValueError:
        return None


async def recorded_step(
    url: str,
    run: Callable[[], Any],
    *,
    warmup_s: float,
    duration_s: float,
    observer: NodeObserver | None,
    worker_pids: WorkerPids,
    interval_s: float = 0.5,
    api_key: str | None = None,
) -> tuple[Any, dict[str, Any]]:
    """Await ``run()`` (one step of load) while a :class:`StepRecorder` watches; returns its result and the keys."""
    pids = await asyncio.to_thread(worker_pids)
    async with httpx.AsyncClient(
        base_url=url, timeout=httpx.Timeout(2.0), trust_env=False, headers=bearer(api_key)
    ) as http:
        t0 = time.perf_counter()
        rec = StepRecorder(http, observer=observer, worker_pids=pids, interval_s=interval_s,
                           window=(t0 + warmup_s, t0 + warmup_s + duration_s))  # fmt: skip
        await rec.start()
        try:
            out = await run()
        finally:
            await rec.stop()
    return out, rec.result()
