"""Scraping a vLLM server's ``/metrics`` into :class:`EngineStats` (old and new metric names, counter deltas)."""

from __future__ import annotations

import http.client
import math
import time
from collections.abc import Callable
from urllib.parse import urlsplit

from amdtop.model import EngineStats

# New name first; older vLLM releases used the second (renamed in V1, see reference vllm.md section 8).
RUNNING = ("vllm:num_requests_running",)
WAITING = ("vllm:num_requests_waiting",)
KV_USAGE = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
GEN_TOKENS = ("vllm:generation_tokens_total", "vllm:generation_tokens")
FINISHED = ("vllm:request_success_total",)
STARTED = ("vllm:time_to_first_token_seconds_count",)


def parse_samples(text: str) -> dict[str, float]:
    """Sum every series of each metric name over its labels (``engine`` etc.) from Prometheus text."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        brace = line.find("{")
        if brace >= 0:
            name = line[:brace]
            rest = line[line.rfind("}") + 1 :].split()
        else:
            parts = line.split()
            name, rest = parts[0], parts[1:]
        if not rest:
            continue
        try:
            value = float(rest[0])
        except ValueError:
            continue
        if math.isnan(value):
            continue
        out[name] = out.get(name, 0.0) + value
    return out


def _first(samples: dict[str, float], names: tuple[str, ...]) -> float | None:
    for n in names:
        if n in samples:
            return samples[n]
    return None


class EngineMeter:
    """Turns successive scrapes of one server into :class:`EngineStats` (tokens/s from counter deltas)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        """Use ``clock`` for the delta time base."""
        self._clock = clock
        self._last: tuple[float, float] | None = None
        self._rate: float | None = None

    def update(self, text: str) -> EngineStats:
        """Feed one scrape; returns the stats (``gen_tokens_per_s`` is ``None`` until two scrapes are seen)."""
        s = parse_samples(text)
        total = _first(s, GEN_TOKENS)
        now = self._clock()
        if total is not None:
            if self._last is not None and now > self._last[0]:
                delta = total - self._last[1]
                # A counter that went down means the server restarted: start over rather than report a negative rate.
                self._rate = None if delta < 0 else delta / (now - self._last[0])
            self._last = (now, total)
        return EngineStats(
            running=_first(s, RUNNING),
            waiting=_first(s, WAITING),
            kv_cache_usage=_first(s, KV_USAGE),
            gen_tokens_per_s=self._rate,
            gen_tokens_total=total,
            requests_finished=_first(s, FINISHED),
            requests_started=_first(s, STARTED),
        )

    def reset(self) -> None:
        """Forget the previous scrape (after a restart)."""
        self._last = None
        self._rate = None


class Prober:
    """Short HTTP calls to workers: ``/health`` and ``/metrics`` (with one :class:`EngineMeter` per worker).

    Plain ``http.client``, one connection per call: the dashboard makes these calls every two seconds per worker, and
    an httpx request cost 3.2x the CPU of this one (476 against 149 us, ``bench/probe_http.py``).
    """

    def __init__(self, timeout_s: float = 0.5) -> None:
        """Every call gives up after ``timeout_s``."""
        self._timeout = timeout_s
        self._meters: dict[str, EngineMeter] = {}

    def _get(self, url: str, path: str) -> tuple[int, bytes] | None:
        # No keep-alive: a pooled connection to a worker outlives its server and leaves the port in FIN_WAIT2.
        parts = urlsplit(url)
        cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
        try:
            conn = cls(parts.hostname or "127.0.0.1", parts.port, timeout=self._timeout)
        except ValueError:  # a port that is not a number
            return None
        try:
            conn.request("GET", parts.path.rstrip("/") + path, headers={"Connection": "close"})
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

    def forget(self, name: str) -> None:
        """Drop ``name``'s counter history (a new run starts its counters at zero)."""
        self._meters.pop(name, None)

    def close(self) -> None:
        """Nothing is held between calls (kept for callers that close what they open)."""
