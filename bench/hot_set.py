"""Where the dashboard's hot set goes: the memory the amdtop process touches each second (``Referenced`` after
``/proc/PID/clear_refs``), split into the idle app (no tick), the node pipeline's tick (frames made but not drawn) and
drawing, read-only and with the three demo workers, beside the Textual floor app; with the CPU of each run.

On this project's VMs a page touched a second after its last touch costs 10-30 us (``bench/page_touch.py``), so CPU
follows the hot set at a rate that changes by the hour; the hot set itself is steady, and is what a change to the code
moves. Cases are interleaved round by round; medians of ``--rounds``.

    .venv/bin/python bench/hot_set.py --rounds 2 --seconds 20

The "not drawn" case runs amdtop through this file with ``--no-draw``: the dashboard draws its first two frames, then
drops each new frame where it would draw it (the poller, the messages and the app's handler all still run).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from page_touch import page_cost_us
from tui_cpu import hot_set_readable, measure

FLOOR = Path(__file__).resolve().with_name("textual_floor.py")


def run_amdtop(argv: list[str]) -> int:
    """``amdtop ARGV``; with ``--no-draw`` first, frames after the second are dropped instead of drawn."""
    if argv[:1] == ["--no-draw"]:
        argv = argv[1:]
        from tui.app import AmdtopApp

        draw = AmdtopApp._show

        def first_frames_only(self: AmdtopApp, frame: object) -> None:
            if self.frames < 2:
                draw(self, frame)  # type: ignore[arg-type]

        AmdtopApp._show = first_frames_only  # type: ignore[method-assign]
    from tui.entry import main

    return main(argv)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--warmup", type=float, default=8.0)
    a = ap.parse_args()
    if not hot_set_readable():
        raise SystemExit("hot_set: this kernel does not let us clear and read /proc/PID/clear_refs and smaps_rollup")

    def amdtop(*extra: str, readonly: bool = True, interval: str = "1") -> list[str]:
        state = tempfile.mkdtemp(prefix="amdtop-hot-")
        argv = [sys.executable, __file__, "--run", *extra, "--demo", "--interval", interval, "--state-dir", state]
        argv += ["--config", f"{state}/none.toml"]
        return [*argv, "--readonly"] if readonly else argv

    cases = {
        "textual floor": lambda: [sys.executable, str(FLOOR)],
        "readonly, no tick": lambda: amdtop(interval="100000"),
        "readonly, not drawn": lambda: amdtop("--no-draw"),
        "readonly": lambda: amdtop(),
        "workers, not drawn": lambda: amdtop("--no-draw", readonly=False),
        "workers": lambda: amdtop(readonly=False),
    }
    page_us = [page_cost_us(1.0)]
    results: dict[str, list[dict[str, object]]] = {}
    for _ in range(a.rounds):
        for name, argv in cases.items():
            run = measure(argv(), "backend", 200, 50, a.warmup, a.seconds, self_only=True)
            results.setdefault(name, []).append(run)
            print(name, json.dumps(run), file=sys.stderr)
    page_us.append(page_cost_us(1.0))

    def med(name: str, key: str) -> float:
        return statistics.median(float(r[key]) for r in results[name])  # type: ignore[arg-type]

    out = {
        "hot_kib_per_s": {k: round(med(k, "hot_kib_per_s")) for k in results},
        "cpu_pct_one_core": {k: round(med(k, "cpu_pct_one_core"), 2) for k in results},
        "vm_us_per_page_after_1s": [round(x, 2) for x in page_us],
        "parts_kib_per_s": {
            f"{who}: tick": round(med(f"{who}, not drawn", "hot_kib_per_s") - med("readonly, no tick", "hot_kib_per_s"))
            for who in ("readonly", "workers")
        }
        | {
            f"{who}: drawing": round(med(who, "hot_kib_per_s") - med(f"{who}, not drawn", "hot_kib_per_s"))
            for who in ("readonly", "workers")
        },
    }
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--run"]:
        raise SystemExit(run_amdtop(sys.argv[2:]))
    raise SystemExit(main())
