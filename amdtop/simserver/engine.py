"""The queueing model of the simulated server: a batched decode loop with a fixed number of slots.

Up to ``capacity`` requests run at once; each running request gets one token per engine tick (``1/tokens_per_s``
seconds), so at concurrency <= capacity every stream decodes at ``tokens_per_s`` and above it the total throughput
saturates at ``capacity * tokens_per_s`` while extra requests wait for a slot (their TTFT grows). One timer drives
every stream, as one batched forward pass does in a real engine, so the server stays cheap at high concurrency.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from amdtop.simserver.metrics import Histogram

TTFT_BUCKETS = (
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1,
    2.5,
    5,
    7.5,
    10,
    20,
    40,
    80,
    160,
    640,
    2560,
)
ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80)
E2E_BUCKETS = (0.3, 0.5, 0.8, 1, 1.5, 2, 2.5, 5, 10, 15, 20, 30, 40, 50, 60, 120, 240, 480, 960, 1920, 7680)
FINISH_REASONS = ("stop", "length", "abort", "error", "repetition")


@dataclass(frozen=True, slots=True)
class SimConfig:
    """Settings of one simulated server."""

    host: str = "127.0.0.1"
    port: int = 8000
    model: str = "sim-model"
    capacity: int = 8
    """Concurrency at which throughput saturates (decode slots)."""
    tokens_per_s: float = 50.0
    """Per-sequence decode speed while unsaturated; 0 = no pacing (zero-work server)."""
    ttft_ms: float = 20.0
    """Prefill time from admission to the first token (to the nearest decode tick while other requests decode)."""
    tp: int = 1
    max_model_len: int = 2048
    max_num_seqs: int | None = None
    kv_cache_tokens: int = 524288
    """KV cache size; requests are admitted only while their blocks fit, and preempted when a block runs out."""
    block_size: int = 16
    gpu_memory_utilization: float = 0.9
    fail_after: int | None = None
    """Requests after the first N get HTTP 500."""
    error_chunk_after: int | None = None
    """Streams after the first N get an error chunk inside the 200 stream."""
    log_file: str | None = None
    nccl_debug: bool = False
    gpu_bdfs: tuple[str, ...] = ()
    """PCI addresses of the simulated GPUs the worker runs on (from HIP_/CUDA_VISIBLE_DEVICES), for its RCCL lines."""
    p2p_disabled: bool = False
    """``NCCL_P2P_DISABLE=1``: the RCCL lines show ``SHM/direct`` between the ranks, as RCCL does."""
    background_load: int = 0
    """Synthetic sequences kept running (demo mode); 0 = none."""
    api_keys: tuple[str, ...] = ()
    """``--api-key`` values (empty: ``VLLM_API_KEY`` from the environment, as vLLM)."""
    dp: int = 1
    """``--data-parallel-size``: engines (each with ``capacity`` slots and its own KV cache), labelled ``engine="i"``."""
    dev_mode: bool = False
    """``VLLM_SERVER_DEV_MODE=1``: serve ``/sleep``, ``/wake_up`` and ``/is_sleeping`` as vLLM does (404 otherwise)."""
    flavour: str = "vllm"
    """``vllm`` or ``sglang``: whose metric names, routes and process titles the server shows."""
    metrics_page: str | None = None
    """A file served verbatim as ``/metrics`` (a real captured page), instead of the simulated one."""


@dataclass(slots=True, eq=False)
class SimRequest:
    """One generation request inside the engine."""

    prompt_tokens: int
    max_tokens: int
    on_token: Callable[[int], None]
    """Called with the 0-based index of each generated token."""
    on_finish: Callable[[str], None]
    """Called once with the finish reason (``length``, ``error`` or ``abort``)."""
    error_at: int | None = None
    """Emit an error instead of this token index."""
    arrived: float = field(default_factory=time.monotonic)
    first_at: float = 0.0
    last_at: float = 0.0
    emitted: int = 0
    done: bool = False
    blocks: int = 0
    """KV blocks held while running (0 while waiting or preempted)."""


class SimEngine:
    """Slots, a waiting queue, counters and histograms; all calls happen on the event loop thread."""

    def __init__(self, cfg: SimConfig) -> None:
        self.cfg = cfg
        self.running: list[SimRequest] = []
        self.waiting: deque[SimRequest] = deque()
        self.prompt_tokens_total = 0
        self.generation_tokens_total = 0
        self.success: dict[str, int] = dict.fromkeys(FINISH_REASONS, 0)
        self.ttft = Histogram(TTFT_BUCKETS)
        self.itl = Histogram(ITL_BUCKETS)
        self.e2e = Histogram(E2E_BUCKETS)
        self.queue = Histogram(E2E_BUCKETS)
        """Time from arrival to first admission (vLLM's ``request_queue_time_seconds``)."""
        self.received = 0
        self.preemptions = 0
        self.used_blocks = 0
        self.total_blocks = max(1, cfg.kv_cache_tokens // max(1, cfg.block_size))
        self._wake = asyncio.Event()
        self._awake = asyncio.Event()
        self._awake.set()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Start the decode loop on the running event loop."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._loop())

    async def stop(self) -> None:
        """Stop the decode loop."""
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None

    def submit(self, req: SimRequest) -> None:
        """Queue a request; it runs as soon as a slot is free."""
        self.prompt_tokens_total += req.prompt_tokens
        self.waiting.append(req)
        self._admit()
        self._wake.set()

    def abort(self, req: SimRequest) -> None:
        """Drop a request whose client went away."""
        if req.done:
            return
        req.done = True
        if req in self.running:
            self.running.remove(req)
            self._release(req)
        elif req in self.waiting:
            self.waiting.remove(req)
        self.success["abort"] += 1
        self._admit()

    def kv_usage(self) -> float:
        """Fraction of the KV cache's blocks held by running requests (vLLM's ``kv_cache_usage_perc``)."""
        return min(1.0, self.used_blocks / self.total_blocks)

    def _blocks_for(self, tokens: int) -> int:
        return -(-tokens // max(1, self.cfg.block_size))

    def _release(self, req: SimRequest) -> None:
        self.used_blocks -= req.blocks
        req.blocks = 0

    def _admit(self) -> None:
        # As vLLM's scheduler: a waiting request starts only when a batch slot is free AND the blocks for its prompt
        # (and what it already generated before a preemption) plus the next token fit; otherwise it stays waiting.
        now = time.monotonic()
        while self.waiting and len(self.running) < self.cfg.capacity:
            req = self.waiting[0]
            # A request longer than the whole cache runs alone (vLLM refuses such a max-model-len at start-up).
            need = min(self.total_blocks, self._blocks_for(req.prompt_tokens + req.emitted + 1))
            if self.used_blocks + need > self.total_blocks:
                break
            self.waiting.popleft()
            if not req.emitted and not req.first_at:
                self.queue.observe(now - req.arrived)
            req.blocks = need
            self.used_blocks += need
            req.first_at = now + self.cfg.ttft_ms / 1000.0
            self.running.append(req)

    def _grow(self, req: SimRequest) -> bool:
        """Give ``req`` the block for its next token, preempting the newest running requests when none is free.

        Returns False when ``req`` itself was preempted (it goes back to the front of the waiting queue and recomputes
        its prompt and output later, as vLLM's recompute preemption does).
        """
        need = min(self.total_blocks, self._blocks_for(req.prompt_tokens + req.emitted + 1))
        while req.blocks < need:
            if self.used_blocks < self.total_blocks:
                req.blocks += 1
                self.used_blocks += 1
                continue
            victim = self.running[-1]
            self.running.remove(victim)
            self._release(victim)
            self.waiting.appendleft(victim)
            self.preemptions += 1
            if victim is req:
                return False
        return True

    def _emit(self, req: SimRequest, now: float) -> None:
        if req.error_at is not None and req.emitted >= req.error_at:
            self._finish(req, now, "error")
            return
        req.on_token(req.emitted)
        if req.emitted == 0:
            self.ttft.observe(now - req.arrived)
        else:
            self.itl.observe(now - req.last_at)
        req.emitted += 1
        req.last_at = now
        self.generation_tokens_total += 1
        if req.emitted >= req.max_tokens:
            self._finish(req, now, "length")

    def _finish(self, req: SimRequest, now: float, reason: str) -> None:
        req.done = True
        self.success[reason] += 1
        self.e2e.observe(now - req.arrived)
        req.on_finish(reason)

    def pause(self) -> None:
        """Sleep mode: no step runs (requests wait, as vLLM's scheduler is paused) until :meth:`resume`."""
        self._awake.clear()

    def resume(self) -> None:
        """Wake from sleep mode."""
        self._awake.set()
        self._wake.set()

    async def _loop(self) -> None:
        period = 1.0 / self.cfg.tokens_per_s if self.cfg.tokens_per_s > 0 else 0.0
        next_tick = time.monotonic()
        while True:
            if not self._awake.is_set():
                await self._awake.wait()
                next_tick = time.monotonic()
            if not self.running:
                self._wake.clear()
                await self._wake.wait()
                next_tick = time.monotonic()
            now = time.monotonic()
            earliest = min(r.first_at for r in self.running)
            if earliest > now:
                # Every running request is still in prefill: sleep until the first one is due.
                await asyncio.sleep(earliest - now)
                next_tick = max(next_tick, earliest)
                continue
            # Prefill ends on the tick nearest to admission + TTFT. A strict `<=` made the tick count of a request
            # admitted on a tick depend on which of two sleeps overslept more, so saturated throughput flipped between
            # capacity x 8/8 and x 8/9 tokens per tick at random (267 vs 297 tok/s at capacity 3, 8-token outputs).
            due = now + period / 2
            for req in list(self.running):
                if req.first_at <= due and not req.done and req.blocks:  # blocks 0: preempted this tick
                    if period == 0.0:
                        while not req.done and self._grow(req):
                            self._emit(req, now)
                    elif self._grow(req):
                        self._emit(req, now)
            for req in self.running:
                if req.done:
                    self._release(req)
            self.running = [r for r in self.running if not r.done]
            self._admit()
            if period == 0.0:
                await asyncio.sleep(0)
                continue
            next_tick += period
            delay = next_tick - time.monotonic()
            if delay < -period:
                next_tick = time.monotonic()  # fell behind (CPU starved): do not burst to catch up
                delay = 0.0
            await asyncio.sleep(max(0.0, delay))
