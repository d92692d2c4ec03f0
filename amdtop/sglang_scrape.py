"""An SGLang ``/metrics`` page read into the series a vLLM page gives, so one engine-state model serves both.

Each SGLang sample is filed under the newest vLLM name of its key (:mod:`amdtop.sglang_metric_names`) with an
``engine`` label: the ``dp_rank`` for the scheduler's series (``"0"`` without one), ``"0"`` for the tokenizer manager's
(which count the whole server). Where several TP or PP ranks of one DP group export the same family
(``--enable-metrics-for-all-schedulers``), the lowest rank's sample is kept: they report one batch, and a gauge added
over ranks would count it twice. Series order on the page does not matter, nor does a family's HELP/TYPE header.
SGLang's own gauges (``gen_throughput``, ``cache_hit_rate``, ``max_total_num_tokens``) keep their SGLang names.
"""

from __future__ import annotations

from amdtop.sglang_metric_names import RANK_LABELS, TABLE
from amdtop.vllm_metric_names import BY_KEY as VLLM_BY_KEY

Labels = tuple[tuple[str, str], ...]
Series = dict[str, list[tuple[Labels, float]]]

_OWN = frozenset({"gen_throughput", "cache_hit_rate", "kv_cache_tokens"})
"""Keys with no vLLM counterpart: kept under their SGLang name."""


def _wanted() -> tuple[str, ...]:
    names = [n + s for m in TABLE for n in m.names for s in (("_sum", "_count") if m.kind == "histogram" else ("",))]
    return tuple(dict.fromkeys(names))


WANTED = _wanted()
"""SGLang sample names read from a page."""


def is_sglang_page(text: str) -> bool:
    """True for a page of SGLang's names (``sglang:``) and none of vLLM's."""
    return "sglang:" in text and "vllm:" not in text


def _rank(labels: dict[str, str], key: str) -> int:
    value = labels.get(key, "0")
    # isdecimal, not isdigit ("²" is a digit int() refuses); a label of 5000 digits is past int()'s limit: rank 0.
    return int(value) if value.isdecimal() and len(value) <= 9 else 0


def _chosen(series: Series) -> list[tuple[str, str, str]]:
    """(SGLang sample name, vLLM sample name, level) per key: the newest SGLang name this page has (an older name is
    read only where the newer is absent)."""
    out: list[tuple[str, str, str]] = []
    for m in TABLE:
        for suffix in ("_sum", "_count") if m.kind == "histogram" else ("",):
            name = next((n + suffix for n in m.names if n + suffix in series), None)
            if name is not None:
                target = m.names[0] if m.key in _OWN else VLLM_BY_KEY[m.key].names[0]
                out.append((name, target + suffix, m.level))
    return out


def to_vllm_series(series: Series) -> Series:
    """The SGLang ``series`` (as :func:`amdtop.vllm_scrape.parse_series` reads them) under vLLM names and labels."""
    out: Series = {}
    for name, target, level in _chosen(series):
        samples = [(dict(labels), value) for labels, value in series[name]]
        # The lowest (tp, pp) rank of each DP group speaks for the group (see the module doc).
        lowest: dict[str, tuple[int, int]] = {}
        for d, _ in samples:
            engine = d.get("dp_rank", "0") if level == "scheduler" else "0"
            rank = (_rank(d, "tp_rank"), _rank(d, "pp_rank"))
            lowest[engine] = min(lowest.get(engine, rank), rank)
        dest = out.setdefault(target, [])
        for d, value in samples:
            engine = d.get("dp_rank", "0") if level == "scheduler" else "0"
            if (_rank(d, "tp_rank"), _rank(d, "pp_rank")) != lowest[engine]:
                continue
            kept = {k: v for k, v in d.items() if k not in RANK_LABELS}
            if "name" in d and "model_name" not in kept:
                kept["model_name"] = d["name"]
            kept["engine"] = engine
            dest.append((tuple(sorted(kept.items())), value))
    return out
