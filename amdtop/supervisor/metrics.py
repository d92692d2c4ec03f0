"""Scraping a vLLM server's ``/metrics`` into :class:`EngineStats`: per engine, names of every vLLM release.

The page is read by :mod:`amdtop.vllm_scrape` (labels kept); names come from :mod:`amdtop.vllm_metric_names`.
"""

from __future__ import annotations

import http.client
import json
import time
from collections.abc import Callable
from urllib.parse import urlsplit

from amdtop.model import EngineSample, EngineStats
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
        )

    def reset(self) -> None:
        """Forget the previous scrape (after a restart)."""
        self._last.clear()
        self._rate.clear()


def bearer(key: str | None) -> dict[str, str]:
    """The header amdtop's clients send a keyed vLLM (``--api-key``/``VLLM_API_KEY``): ``Authorization: Bearer``."""
    return {"Authorization": f"Bearer {key}"} if key else {}


class Prober:
    """Short HTTP calls to workers: ``/health`` and ``/metrics`` (with one :class:`EngineMeter` per worker).

    Plain ``http.client``, one connection per call: the dashboard makes these calls every two seconds per worker, and
    an httpx request cost 3.2x the CPU of this one (476 against 149 us, ``bench/probe_http.py``).
    """

    def __init__(self, timeout_s: float = 0.5) -> None:
        """Every call gives up after ``timeout_s``."""
        self._timeout = timeout_s
        self._meters: dict[str, EngineMeter] = {}
        self.keys: dict[str, str] = {}
        """API key per worker base URL: sent as ``Authorization: Bearer`` (vLLM guards /v1 with it; /health and
        /metrics are open on vLLM, but a proxy in front may guard them too)."""

    def _get(self, url: str, path: str, method: str = "GET") -> tuple[int, bytes] | None:
        # No keep-alive: a pooled connection to a worker outlives its server and leaves the port in FIN_WAIT2.
        parts = urlsplit(url)
        cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
        try:
            conn = cls(parts.hostname or "127.0.0.1", parts.port, timeout=self._timeout)
        except ValueError:  # a port that is not a number
            return None
        try:
            headers = {"Connection": "close", **bearer(self.keys.get(url.rstrip("/")))}
            conn.request(method, parts.path.rstrip("/") + path, headers=headers)
            resp = conn.getresponse()
            return resp.status, resp.read()
        except (OSError, http.client.HTTPException, ValueError):
            return None
        finally:
            conn.close()

    def health(self, url: str) -> int | None:
        """HTTP status of ``/health``; ``None`` when refused or timed out (normal while vLLM loads)."""
        got = self._get(url, "/health")
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
        """Nothing is held between calls (kept for callers that close what they open)."""
