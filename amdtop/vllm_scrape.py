"""One vLLM ``/metrics`` page, read with its labels: per-engine gauges, counters summed for the worker.

vLLM labels every series with ``engine`` (the DP rank, ``"0"`` without data parallelism; releases before V1 had no
``engine`` label: that is engine ``"0"`` here) and ``model_name``. A gauge belongs to one engine: two engines each at
60 % KV usage are not a worker at 120 %. Counters add up over engines.

Reading: only the lines of metrics :mod:`amdtop.vllm_metric_names` lists are parsed (a vLLM page is 600+ lines, most
of them histogram buckets and ``python_*``/``process_*`` series nobody here reads). prometheus-client's text parser
reads a whole page in 1-2 orders of magnitude more time than the 0.2 ms a scrape may cost (``bench/metrics_parse.py``,
docs/benchmarks.md "Reading /metrics"), so the selected lines are parsed by hand; ``tests/unit/test_vllm_scrape.py``
checks every recorded page against prometheus-client's parser, sample for sample.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass

from amdtop import sglang_scrape
from amdtop.vllm_metric_names import BY_KEY, SLEEP_LEVELS, TABLE

_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')
_UNESCAPE = re.compile(r"\\(.)")
Labels = tuple[tuple[str, str], ...]
"""Sorted (name, value) pairs of one series."""


def _unescape(value: str) -> str:
    if "\\" not in value:
        return value
    return _UNESCAPE.sub(lambda m: "\n" if m.group(1) == "n" else m.group(1), value)


def _wanted(extra: Iterable[str]) -> tuple[str, ...]:
    names = [n for m in TABLE for n in m.names]
    names += [f"{n}_{s}" for m in TABLE if m.kind == "histogram" for n in m.names for s in ("sum", "count")]
    return tuple(dict.fromkeys([*names, *extra]))


WANTED = _wanted(("vllm:cache_config_info",))
"""Sample names read from a page (histograms by their ``_sum`` and ``_count``)."""


def parse_series(text: str, wanted: Iterable[str] | None = None) -> dict[str, list[tuple[Labels, float]]]:
    """Every sample of the ``wanted`` names (default :data:`WANTED`; ``()`` for all) with its labels.

    NaN samples are dropped (vLLM exports NaN for a gauge with nothing to report); malformed lines are skipped.
    """
    names = frozenset(WANTED if wanted is None else wanted)
    every = not names
    out: dict[str, list[tuple[Labels, float]]] = {}
    for line in text.splitlines():
        if not line or line[0] == "#":
            continue
        brace = line.find("{")
        if brace >= 0:
            name = line[:brace]
            if not every and name not in names:
                continue
            close = line.rfind("}")
            if close < brace:
                continue
            labels: Labels = tuple(sorted((k, _unescape(v)) for k, v in _LABEL.findall(line, brace + 1, close)))
            rest = line[close + 1 :].split()
        else:
            parts = line.split()
            if not parts:
                continue  # blank but for whitespace: not a sample (one such line broke every worker's status)
            name = parts[0]
            if not every and name not in names:
                continue
            labels, rest = (), parts[1:]
        if not rest:
            continue
        try:
            value = float(rest[0])
        except ValueError:
            continue
        if math.isnan(value):
            continue
        out.setdefault(name, []).append((labels, value))
    return out


def _engine_order(engine: str) -> tuple[bool, int, str]:
    """Numbered engines first, by number; a label that is not a plain number of a few digits ("²", 5000 digits: both
    pass ``isdigit`` and fail ``int``) sorts after them by its text."""
    number = engine.isdecimal() and len(engine) <= 9
    return (not number, int(engine) if number else 0, engine)


def _engine(labels: Labels) -> str:
    return next((v for k, v in labels if k == "engine"), "0")


@dataclass(frozen=True, slots=True)
class Scrape:
    """One page: sample name -> [(labels, value)], with lookups by :mod:`amdtop.vllm_metric_names` key."""

    series: dict[str, list[tuple[Labels, float]]]
    engine_kind: str = "vllm"
    """``vllm`` or ``sglang``: the server that wrote the page (an SGLang page is filed under vLLM names)."""

    @classmethod
    def parse(cls, text: str) -> Scrape:
        """Read the metrics amdtop uses from a page (vLLM's, or SGLang's read by :mod:`amdtop.sglang_scrape`)."""
        if sglang_scrape.is_sglang_page(text):
            return cls(sglang_scrape.to_vllm_series(parse_series(text, sglang_scrape.WANTED)), "sglang")
        return cls(parse_series(text))

    def name_of(self, key: str, suffix: str = "") -> str | None:
        """The newest name of ``key`` (plus ``suffix``: ``_sum``) this page has, ``None`` when it has none."""
        for name in BY_KEY[key].names:
            if name + suffix in self.series:
                return name + suffix
        return None

    def engines(self) -> tuple[str, ...]:
        """Engine labels on the page, in numeric order (``("0",)`` for one engine or a pre-V1 page)."""
        seen = {_engine(labels) for samples in self.series.values() for labels, _ in samples}
        return tuple(sorted(seen, key=_engine_order)) or ("0",)

    def by_engine(self, key: str, suffix: str = "") -> dict[str, float]:
        """``key``'s value per engine (label sets other than ``engine``/``model_name`` added up within an engine)."""
        name = self.name_of(key, suffix)
        if name is None:
            return {}
        out: dict[str, float] = {}
        for labels, value in self.series[name]:
            engine = _engine(labels)
            out[engine] = out.get(engine, 0.0) + value
        return out

    def by_name(self, name: str) -> dict[str, float]:
        """Sample ``name``'s value per engine, summed within an engine (a name outside the vLLM table, such as
        SGLang's ``sglang:gen_throughput``)."""
        out: dict[str, float] = {}
        for labels, value in self.series.get(name, ()):
            engine = _engine(labels)
            out[engine] = out.get(engine, 0.0) + value
        return out

    def total(self, key: str, suffix: str = "") -> float | None:
        """A counter (or a request count) added up over engines; ``None`` when the page lacks it."""
        per = self.by_engine(key, suffix)
        return sum(per.values()) if per else None

    def highest(self, key: str) -> float | None:
        """The highest engine's value of a fraction gauge (KV usage): never summed across engines."""
        per = self.by_engine(key)
        return max(per.values()) if per else None

    def sleep_levels(self) -> dict[str, int]:
        """Sleep level per engine from ``vllm:engine_sleep_state`` (the series valued 1); empty when not exposed."""
        name = self.name_of("sleep_state")
        if name is None:
            return {}
        out: dict[str, int] = {}
        for labels, value in self.series[name]:
            state = next((v for k, v in labels if k == "sleep_state"), None)
            engine = _engine(labels)
            if state in SLEEP_LEVELS:
                out.setdefault(engine, 0)
                if value >= 0.5:
                    out[engine] = max(out[engine], SLEEP_LEVELS[state])
        return out

    def summed(self) -> dict[str, float]:
        """Every sample name with its values added up over labels (the old flat view; gauges here are sums)."""
        return {name: sum(v for _, v in samples) for name, samples in self.series.items()}
