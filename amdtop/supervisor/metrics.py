"""Scraping a vLLM server's ``/metrics`` into :class:`EngineStats`: per engine, names of every vLLM release.

The page is read by :mod:`amdtop.vllm_scrape` (labels kept); names come from :mod:`amdtop.vllm_metric_names`.
"""

from __future__ import annotations

import http.client
import json
import time
from collections.abc import Callable

from amdtop.model import EngineSample, EngineStats
from amdtop.supervisor.bounded_get import KeptConnections
from amdtop.vllm_scrape import Scrape


def parse_samples(text: str) -> dict[str, float]:
    """Every metric amdtop reads, added up over its labels (counters; for gauges prefer :class:`Scrape`)."""
    return Scrape.parse(text).summed()


class EngineMeter:
    """Turns successive scrapes of one server into :class:`EngineStats` (tokens/s from counter deltas, per engine)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        """Use ``clock`` for the delta time base."""
        self._clock = clock
        self._last: dict[str, tuple[float, float]] = {}
        self._rate: dict[str, float | None] = {}
        self._hist: dict[str, tuple[float, float]] = {}

    def _rate_of(self, engine: str, total: float, now: float) -> float | None:
        last = self._last.get(engine)
        if last is not None and now > last[0]:
            delta = total - last[1]
            # A counter that went down means the server restarted: start over rather than report a negative rate.
            self._rate[engine] = None if delta < 0 else delta / (now - last[0])
        self._last[engine] = (now, total)
        return self._rate.get(engine)

    def update(self, text: str) -> EngineStats:
        """Feed one scrape; returns the stats (``gen_tokens_per_s`` is ``None`` until two scrapes are seen)."""
        return self.update_scrape(Scrape.parse(text))

    def update_scrape(self, page: Scrape) -> EngineStats:
        """:meth:`update` for a page already read."""
        now = self._clock()
        if page.engine_kind == "sglang":
            return self._sglang(page, now)
        gen = page.by_engine("generation_tokens")
        running, waiting = page.by_engine("running"), page.by_engine("waiting")
        kv, sleep = page.by_engine("kv_cache_usage"), page.sleep_levels()
        finished, started = page.by_engine("requests_finished"), page.by_engine("ttft", "_count")
        engines = []
        rates: list[float] = []
        for engine in page.engines():
            rate = self._rate_of(engine, gen[engine], now) if engine in gen else None
            if rate is not None:
                rates.append(rate)
            engines.append(
                EngineSample(
                    engine,
                    running.get(engine),
                    waiting.get(engine),
                    kv.get(engine),
                    rate,
                    sleep.get(engine),
                    # The stall judge compares these per DP replica: one engine can hang while another streams.
                    gen_tokens_total=gen.get(engine),
                    requests_finished=finished.get(engine),
                    requests_started=started.get(engine),
                )
            )
        return EngineStats(
            # Request counts add up over replicas; a KV fraction does not: the worker shows its fullest engine.
            running=sum(running.values()) if running else None,
            waiting=sum(waiting.values()) if waiting else None,
            kv_cache_usage=max(kv.values()) if kv else None,
            gen_tokens_per_s=sum(rates) if rates and len(rates) == len(gen) else None,
            engines=tuple(engines),
            sleep_level=max(sleep.values()) if sleep else None,
            # The stall judge compares these between scrapes (the CPU build's running gauge reads 0 under load).
            gen_tokens_total=page.total("generation_tokens"),
            requests_finished=page.total("requests_finished"),
            requests_started=page.total("ttft", "_count"),
            cache_hit_rate=_ratio(page.total("prefix_cache_hits"), page.total("prefix_cache_queries")),
            ttft_mean_s=self._mean(page, "ttft"),
            itl_mean_s=self._mean(page, "inter_token_latency"),
        )

    def _mean(self, page: Scrape, key: str) -> float | None:
        """Mean of histogram ``key`` over the observations since the previous scrape (since start on the first, or
        when none came in between: the last known mean beats a blank)."""
        total, count = page.total(key, "_sum"), page.total(key, "_count")
        if total is None or not count:
            return None
        last = self._hist.get(key)
        self._hist[key] = (total, count)
        if last is not None and count > last[1] and total >= last[0]:
            return (total - last[0]) / (count - last[1])
        return total / count

    def _sglang(self, page: Scrape, now: float) -> EngineStats:
        """:meth:`update_scrape` for an SGLang page: the scheduler's gauges per DP rank, the tokenizer's counters for
        the whole server. Per rank, tokens/s is SGLang's ``gen_throughput`` gauge, read as 0 while the rank runs nothing
        (the gauge keeps its last value when idle: sgl-project/sglang#4244); the worker's is the counter's rate once two
        scrapes are seen, the sum of the ranks' gauges before."""
        running, waiting = page.by_engine("running"), page.by_engine("waiting")
        kv, gauge = page.by_engine("kv_cache_usage"), page.by_name("sglang:gen_throughput")
        hit = page.by_name("sglang:cache_hit_rate")
        engines = []
        rates: list[float] = []
        for engine in page.engines():
            rate = gauge.get(engine)
            if rate is not None and running.get(engine) == 0:
                rate = 0.0
            if rate is not None:
                rates.append(rate)
            engines.append(EngineSample(engine, running.get(engine), waiting.get(engine), kv.get(engine), rate))
        gen_total = page.total("generation_tokens")
        counted = self._rate_of("*", gen_total, now) if gen_total is not None else None
        # SGLang's first page reported the hit rate in percent (sgl-project/sglang#1461): a fraction is <= 1.
        hits = [v / 100.0 if v > 1.0 else v for v in hit.values()]
        return EngineStats(
            running=sum(running.values()) if running else None,
            waiting=sum(waiting.values()) if waiting else None,
            kv_cache_usage=max(kv.values()) if kv else None,
            gen_tokens_per_s=counted if counted is not None else (sum(rates) if rates else None),
            engines=tuple(engines),
            gen_tokens_total=gen_total,
            requests_finished=page.total("requests_finished"),
            requests_started=page.total("ttft", "_count"),
            cache_hit_rate=max(hits) if hits else None,
            ttft_mean_s=self._mean(page, "ttft"),
            itl_mean_s=self._mean(page, "inter_token_latency"),
            kind="sglang",
        )

    def reset(self) -> None:
        """Forget the previous scrape (after a restart)."""
        self._last.clear()
        self._rate.clear()
        self._hist.clear()


def _ratio(num: float | None, den: float | None) -> float | None:
    return None if num is None or not den else num / den


def bearer(key: str | None) -> dict[str, str]:
    """The header amdtop's clients send a keyed vLLM (``--api-key``/``VLLM_API_KEY``): ``Authorization: Bearer``."""
    return {"Authorization": f"Bearer {key}"} if key else {}


class Prober:
    """Short HTTP calls to workers: ``/health`` and ``/metrics`` (with one :class:`EngineMeter` per worker).

    Plain ``http.client`` (an httpx request cost 3.2x the CPU of a call, 476 against 149 us, ``bench/probe_http.py``);
    the dashboard makes these calls every two seconds per worker, so the GETs keep their connection between calls
    (half a call's CPU: :class:`~amdtop.supervisor.bounded_get.KeptConnections`). Each call is bounded in time and
    bytes (:mod:`amdtop.supervisor.bounded_get`).
    """

    def __init__(self, timeout_s: float = 0.5) -> None:
        """Every call gives up after ``timeout_s``."""
        self._timeout = timeout_s
        self._meters: dict[str, EngineMeter] = {}
        self._conns = KeptConnections()
        self.keys: dict[str, str] = {}
        """API key per worker base URL: sent as ``Authorization: Bearer`` (vLLM guards /v1 with it; /health and
        /metrics are open on vLLM, but a proxy in front may guard them too)."""

    def _get(self, url: str, path: str, method: str = "GET") -> tuple[int, bytes] | None:
        # Bounded in time and bytes (bounded_get): a worker's server is untrusted input.
        headers = bearer(self.keys.get(url.rstrip("/")))
        try:
            return self._conns.request(url, path, method=method, headers=headers, timeout=self._timeout)
        except (OSError, http.client.HTTPException, ValueError):
            return None

    def health(self, url: str) -> int | None:
        """HTTP status of ``/health``; ``None`` when refused or timed out (normal while vLLM loads)."""
        got = self._get(url, "/health")
        return None if got is None else got[0]

    def status(self, url: str, path: str) -> int | None:
        """HTTP status of ``GET path``; ``None`` when refused or timed out."""
        got = self._get(url, path)
        return None if got is None else got[0]

    def scrape(self, name: str, url: str) -> EngineStats | None:
        """Scrape ``/metrics`` of worker ``name``; ``None`` when it does not answer 200."""
        got = self._get(url, "/metrics")
        if got is None or got[0] != 200:
            return None
        return self._meters.setdefault(name, EngineMeter()).update(got[1].decode("utf-8", "replace"))

    def _json_field(self, url: str, path: str, key: str) -> object:
        """``key`` of the JSON object ``GET path`` answers with 200; ``None`` otherwise."""
        got = self._get(url, path)
        if got is None or got[0] != 200:
            return None
        try:
            return json.loads(got[1]).get(key)
        except (ValueError, AttributeError):
            return None

    def load(self, url: str) -> float | None:
        """``GET /load``'s ``server_load``: requests the API server holds open (``None`` when not answered)."""
        value = self._json_field(url, "/load", "server_load")
        return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None

    def is_sleeping(self, url: str) -> bool | None:
        """``GET /is_sleeping`` (vLLM dev mode); ``None`` when the server does not answer it (dev mode off: 404)."""
        value = self._json_field(url, "/is_sleeping", "is_sleeping")
        return value if isinstance(value, bool) else None

    def post(self, url: str, path: str) -> tuple[int, bytes] | None:
        """``POST path`` (``/sleep?level=1``, ``/wake_up``); ``None`` when refused or timed out."""
        return self._get(url, path, "POST")

    def forget(self, name: str) -> None:
        """Drop ``name``'s counter history (a new run starts its counters at zero)."""
        self._meters.pop(name, None)

    def close(self) -> None:
        """Close the kept connections."""
        self._conns.close()
