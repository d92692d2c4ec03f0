"""What the worker and the node did during one ramp step: /metrics deltas and levels, GPU samples, CPU placement.

The recorder runs beside the load generator on the same event loop: one ``/metrics`` scrape and one node observation
every ``interval_s``, levels kept only inside the measurement window, counters differenced over the whole step.
Node data comes through :class:`NodeObserver`, a callable the caller wires to whatever already polls the GPUs (the
TUI's frame, or a telemetry backend in the CLI), so recording adds no device calls of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import httpx
import psutil

from amdtop.cpulist import format_cpulist
from amdtop.health.throttle import throttle_shares
from amdtop.health.traffic import fabric_traffic
from amdtop.pipeline.frame import NodeFrame
from amdtop.supervisor.metrics import bearer
from amdtop.vllm_metric_names import histogram_names, names
from amdtop.vllm_scrape import Scrape

KV_USAGE = names("kv_cache_usage")
"""Names of every vLLM release, newest first (amdtop/vllm_metric_names.py)."""
PREEMPTIONS = names("preemptions")
PROMPT_TOKENS = names("prompt_tokens")
GEN_TOKENS = names("generation_tokens")
QUEUE_SUM = histogram_names("queue_time", "_sum")
QUEUE_COUNT = histogram_names("queue_time", "_count")
THROTTLED_SHARE = 0.2
"""A GPU counts as throttled for an interval when a limit reason held it back this share of the time."""
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


@dataclass(frozen=True, slots=True)
class GpuObservation:
    """One GPU of the worker at one moment, as the node's telemetry reported it (``None`` = not given)."""

    index: int
    util_pct: float | None = None
    power_w: float | None = None
    power_cap_w: float | None = None
    throttled: bool | None = None
    """Clocks held back by power or temperature (AMD throttle status, NVML clocks-event reasons)."""
    throttle_reason: str | None = None
    xgmi_bytes_per_s: float | None = None
    """Traffic over the GPU's XGMI/NVLink links, both directions."""
    tp_group: int | None = None
    """Which of the worker's TP groups the GPU belongs to (its DP replica), ``None`` for a worker of one group."""


def group_index(groups: Sequence[Sequence[int]] | None) -> dict[int, int]:
    """GPU -> position of its TP group, for a worker of several groups (empty otherwise)."""
    if not groups or len(groups) < 2:
        return {}
    return {gpu: i for i, group in enumerate(groups) for gpu in group}


class NodeObserver(Protocol):
    """Returns the worker's GPUs as seen now; wired by the integrator to the one frame, by the CLI to a backend."""

    def __call__(self) -> Sequence[GpuObservation]: ...


def observer_from_backend(
    sample: Callable[[], Any], gpus: Sequence[int] | None = None, groups: Sequence[Sequence[int]] | None = None
) -> NodeObserver:
    """A :class:`NodeObserver` over any ``sample() -> NodeSnapshot | None`` (a telemetry backend's ``sample``, or the
    one frame's ``snapshot`` in the TUI, which then costs no device call of its own).

    Only ``gpus`` are kept (``None``: every GPU of the snapshot). Throttling and XGMI/NVLink rates come from two
    successive snapshots through the health module (residency counters or active reasons; link byte counters), so a
    call that sees the same snapshot again keeps the last known values.
    """
    wanted = None if gpus is None else set(gpus)
    group_of = group_index(groups)
    state: dict[str, Any] = {"prev": None, "throttle": {}, "xgmi": {}}

    def observe() -> Sequence[GpuObservation]:
        snap = sample()
        if snap is None:
            return ()
        prev = state["prev"]
        if prev is not None and snap.timestamp > prev.timestamp:
            state["throttle"] = {t.gpu: t.worst for t in throttle_shares([prev, snap], window_s=float("inf"))}
            fabric = fabric_traffic(prev, snap)
            state["xgmi"] = {
                g.gpu: (g.read_bps or 0.0) + (g.write_bps or 0.0)
                for g in (fabric.gpus if fabric else ())
                if g.read_bps is not None or g.write_bps is not None
            }
        if prev is None or snap.timestamp > prev.timestamp:
            state["prev"] = snap
        caps = {g.index: g.power_cap_w for g in snap.topology.gpus}
        out = []
        for g in snap.gpus:
            if g.lost or (wanted is not None and g.index not in wanted):
                continue
            worst = state["throttle"].get(g.index, "unknown")
            throttled = None if worst == "unknown" else worst is not None and worst[1] >= THROTTLED_SHARE
            out.append(
                GpuObservation(
                    index=g.index,
                    util_pct=g.util_pct,
                    power_w=g.power_w,
                    power_cap_w=caps.get(g.index),
                    throttled=throttled,
                    throttle_reason=worst[0] if throttled and worst not in (None, "unknown") else None,
                    xgmi_bytes_per_s=state["xgmi"].get(g.index),
                    tp_group=group_of.get(g.index),
                )
            )
        return out

    return observe


def observer_from_frames(
    frame: Callable[[], NodeFrame], gpus: Sequence[int] | None = None, groups: Sequence[Sequence[int]] | None = None
) -> NodeObserver:
    """A :class:`NodeObserver` over the one frame (the TUI's): the throttle shares and fabric rates the pipeline
    already computed, read as they are; ``frame`` raises RuntimeError before the first frame (nothing observed).
    ``groups``: the worker's TP groups (a data-parallel worker has several; spreads are then judged per group)."""
    wanted = None if gpus is None else set(gpus)
    group_of = group_index(groups)

    def observe() -> Sequence[GpuObservation]:
        try:
            current = frame()
        except RuntimeError:
            return ()
        snap = current.snapshot
        rates = {g.gpu: g for g in current.fabric.gpus} if current.fabric is not None else {}
        out = []
        for g in snap.gpus:
            if g.lost or (wanted is not None and g.index not in wanted):
                continue
            share = current.throttle_of(g.index)
            worst = share.worst if share is not None else None
            throttled = None if share is None else worst is not None and worst[1] >= THROTTLED_SHARE
            rate = rates.get(g.index)
            info = snap.topology.gpu(g.index)
            both = None if rate is None else [v for v in (rate.read_bps, rate.write_bps) if v is not None]
            out.append(
                GpuObservation(
                    index=g.index,
                    util_pct=g.util_pct,
                    power_w=g.power_w,
                    power_cap_w=None if info is None else info.power_cap_w,
                    throttled=throttled,
                    throttle_reason=worst[0] if throttled and worst is not None else None,
                    xgmi_bytes_per_s=sum(both) if both else None,
                    tp_group=group_of.get(g.index),
                )
            )
        return out

    return observe


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
    with contextlib.suppress(ValueError, KeyError):
        return int(float(cfg["kv_cache_size_tokens"]))
    with contextlib.suppress(ValueError, KeyError):
        return int(float(cfg["num_gpu_blocks"])) * int(float(cfg["block_size"]))
    return None


def listener_pids(port: int) -> list[int]:
    """The processes listening on TCP ``port`` here and all their descendants (the worker's API server, EngineCore,
    TP ranks); empty when none is found or /proc hides them."""
    roots: set[int] = set()
    with contextlib.suppress(psutil.Error, OSError):
        for conn in psutil.net_connections(kind="tcp"):
            if conn.status == psutil.CONN_LISTEN and conn.laddr and conn.laddr.port == port and conn.pid:
                roots.add(conn.pid)
    pids: list[int] = []
    for pid in sorted(roots):
        with contextlib.suppress(psutil.Error):
            proc = psutil.Process(pid)
            pids += [pid, *(c.pid for c in proc.children(recursive=True))]
    return list(dict.fromkeys(pids))


def url_port(url: str) -> int | None:
    """The port of a local ``url`` (loopback or this host's name), ``None`` for a remote endpoint."""
    parsed = httpx.URL(url)
    if parsed.host not in ("127.0.0.1", "localhost", "::1", "0.0.0.0") and parsed.host != _hostname():
        return None
    return parsed.port or (443 if parsed.scheme == "https" else 80)


def _hostname() -> str:
    import socket

    return socket.gethostname()


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

    def set_window(self, start: float, end: float) -> None:
        """The measurement window (levels outside it are dropped)."""
        self._window = (start, end)

    async def _scrape(self) -> Scrape | None:
        try:
            resp = await self._http.get("/metrics")
        except httpx.HTTPError:
            return None
        if resp.status_code != 200:
            return None
        if not self._cache:
            self._cache = cache_config(resp.text)
        self.metrics_ok = True
        return Scrape.parse(resp.text)

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
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        last = await self._scrape()
        if last is not None:
            self._last = last

    def result(self) -> dict[str, Any]:
        """The step's recorded keys (flat, so the CSV keeps one row per step); ``None`` where nothing was seen."""
        lv = self._levels
        out: dict[str, Any] = {"server_metrics": self.metrics_ok}
        a, b = self._first, self._last

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
        out["block_size"] = int(self._cache["block_size"]) if self._cache.get("block_size", "").isdigit() else None
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


WorkerPids = Callable[[], Sequence[int]]


def default_worker_pids(url: str) -> WorkerPids:
    """The processes behind a local ``url`` (found through its listening port); none for a remote one."""
    port = url_port(url)
    return (lambda: listener_pids(port)) if port is not None else (lambda: ())


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
