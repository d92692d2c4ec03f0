"""Cost of masking secrets in every log line the Logs pane shows (``amdtop.secrets.mask_log_line`` in ``make_line``).

Usage: .venv/bin/python bench/log_mask.py [--repeat 200] [--runs 7]
Lines: every line of the real RCCL/NCCL captures under tests/fixtures/rccl/real (their sources are in each file's
first line) plus one vLLM ``non-default args`` echo per 100 lines. Measured: ``make_line`` as shipped (classify,
transport mark, mask) against the same without the mask (the peer, in the same run); medians over ``--runs``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from amdtop.logread.rccl.lines import LogLine, classify, is_transport_line, make_line

ECHO = "INFO 12-02 06:00:00 [utils.py:253] non-default args: {'model_tag': '/m', 'api_key': ['k1', 'k2'], 'port': 8000}"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=200)
    ap.add_argument("--runs", type=int, default=7)
    a = ap.parse_args()
    root = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "rccl" / "real"
    lines = [ln for f in sorted(root.glob("*.log")) for ln in f.read_text().splitlines()[1:]]
    lines = (lines + [ECHO] * max(1, len(lines) // 100)) * a.repeat

    def plain() -> None:
        for t in lines:
            LogLine("w", "w.log", t, classify(t), is_transport_line(t))

    def masked() -> None:
        for t in lines:
            make_line("w", "w.log", t)

    out: dict[str, list[float]] = {"plain": [], "masked": []}
    for _ in range(a.runs):
        for name, fn in (("plain", plain), ("masked", masked)):
            t0 = time.perf_counter()
            fn()
            out[name].append((time.perf_counter() - t0) / len(lines) * 1e6)
    p, m = statistics.median(out["plain"]), statistics.median(out["masked"])
    print(
        f"{len(lines)} lines x {a.runs} runs: make_line {m:.2f} us/line, without the mask {p:.2f} us/line, "
        f"ratio {m / p:.2f}"
    )


if __name__ == "__main__":
    main()
