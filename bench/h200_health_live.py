"""Live check on a GPU machine: poll the NVML backend for --seconds at 1 s, then print what the health functions, the
exporter and the health pane make of it (run under load to see the GPU flagged).

    python3 bench/h200_health_live.py --seconds 12 --out live.txt
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from prometheus_client.exposition import generate_latest
from prometheus_client.registry import Collector, CollectorRegistry
from rich.console import Console

from amdtop.exporter.families import build_families
from amdtop.health.report import health_flags
from amdtop.health.throttle import throttle_shares
from amdtop.health.traffic import latest_traffic
from amdtop.pipeline import NodeFrame
from amdtop.telemetry import open_backend
from amdtop.telemetry.base import BackendOptions
from widgets.fabric_view import render_health


class _Once(Collector):
    def __init__(self, state: NodeFrame) -> None:
        self._state = state

    def collect(self):  # type: ignore[no-untyped-def]
        return build_families(self._state)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=int, default=12)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    backend = open_backend("nvml", BackendOptions())
    history = []
    for _ in range(args.seconds):
        history.append(backend.sample())
        time.sleep(1.0)
    shares = throttle_shares(history)
    state = NodeFrame(snapshot=history[-1], fabric=latest_traffic(history), throttle=tuple(shares))
    registry = CollectorRegistry()
    registry.register(_Once(state))
    text = generate_latest(registry).decode()
    console = Console(record=True, width=100)
    console.print(render_health(history[-1], shares))
    for flag in health_flags(history):
        console.print(f"flag {flag.kind.value}: {flag.message}")
    wanted = ("amdtop_gpu_throttle", "gpu_ecc", "amdtop_gpu_ecc", "amdtop_flags")
    lines = [ln for ln in text.splitlines() if ln.startswith(wanted)]
    out = console.export_text() + "\n" + "\n".join(lines) + "\n"
    args.out.write_text(out)
    print(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
