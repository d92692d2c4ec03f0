"""RSS of the in-process dashboard on the simulated 8-GPU node with 8 workers, beside the floor (a bare Textual app,
``bench/textual_floor.py``, alone and with pynvml imported and ``nvmlInit`` called) and the demo's read-only and
three-worker dashboards, in one sitting.

The 8 workers are a demo-like profile file (``bench/worker_parts.py``'s: 8 TP=1 simulated vLLM servers, one per GPU,
RCCL INFO in their logs) written into the state dir before ``amdtop --demo`` starts, which launches them. Each run is
``bench/tui_cpu.py``'s pty run (200x50, 1 s interval, ``--warmup`` then ``--seconds``), RSS read at the window's end;
cases interleaved ``--rounds`` times, medians printed as JSON. RSS is the measured process's own (``statm``), not its
workers'. On a machine without an NVIDIA driver the NVML floor
is the import alone (the init fails); the lent GPU gives the initialised one.

    .venv/bin/python bench/rss_workers.py --rounds 2 --seconds 20
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tui_cpu import measure
from worker_parts import profiles

from amdtop.supervisor.demo import DEMO_FILE

AMDTOP = str(Path(sys.executable).with_name("amdtop"))
FLOOR = str(Path(__file__).resolve().with_name("textual_floor.py"))


def amdtop(workers: int | None, port_base: int) -> list[str]:
    """``workers``: None read-only, 3 the demo's own profiles, otherwise that many simulated TP=1 workers."""
    state = Path(tempfile.mkdtemp(prefix="amdtop-rss-"))
    if workers is not None and workers != 3:
        (state / DEMO_FILE).write_text(profiles(workers, port_base))
    elif workers == 3:
        from amdtop.supervisor.demo import ensure_demo_profiles
        from amdtop.telemetry.sim import SimBackend

        ensure_demo_profiles(state, SimBackend().topology(), port_base=port_base)
    argv = [AMDTOP, "--demo", "--interval", "1", "--state-dir", str(state), "--config", f"{state}/none.toml"]
    return [*argv, "--readonly"] if workers is None else argv


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--warmup", type=float, default=10.0)
    ap.add_argument("--port-base", type=int, default=28500)
    a = ap.parse_args()
    runs: dict[str, list[dict[str, object]]] = {}
    for _ in range(a.rounds):
        cases = (
            ("amdtop 8 GPUs, 8 workers", amdtop(8, a.port_base), "amdtop", None),
            ("amdtop demo, 3 workers", amdtop(3, a.port_base + 10), "amdtop", None),
            ("amdtop demo, read-only", amdtop(None, a.port_base), "amdtop", None),
            ("textual floor", [sys.executable, FLOOR], "backend", None),
            ("textual floor + pynvml", [sys.executable, FLOOR], "backend", "1"),
        )
        for name, argv, marker, nvml in cases:
            if nvml:
                os.environ["AMDTOP_FLOOR_NVML"] = nvml
            try:
                run = measure(argv, marker, 200, 50, a.warmup, a.seconds, self_only=True)
            finally:
                os.environ.pop("AMDTOP_FLOOR_NVML", None)
            runs.setdefault(name, []).append(run)
            print(name, json.dumps(run), file=sys.stderr)
    out = {
        "rss_mib": {
            k: round(statistics.median(float(r["self_rss_mib_at_end"]) for r in v), 1) for k, v in runs.items()
        },  # type: ignore[arg-type]
        "rss_mib_runs": {k: [round(float(r["self_rss_mib_at_end"]), 1) for r in v] for k, v in runs.items()},  # type: ignore[arg-type]
        "tree_rss_mib": {
            k: round(statistics.median(float(r["rss_mib_at_end"]) for r in v), 1) for k, v in runs.items()
        },  # type: ignore[arg-type]
        "workers_seen": {k: [r["descendants_at_end"] for r in v] for k, v in runs.items()},
    }
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
