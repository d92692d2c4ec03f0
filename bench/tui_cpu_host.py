"""CPU of the amdtop process alone (not its simulated workers) on the demo node, read-only against with its three
workers, each with and without N unrelated sleeping processes on the host; terminal bytes/s beside ``top -d 1``; and
the floor under any Textual dashboard (``bench/textual_floor.py``, a one-line clock) as a peer in every round; the hot
set of each (KiB the process touches per second) and this VM's cost per page touched after a 1 s gap
(``bench/page_touch.py``) at the start and the end of the sitting.

Cases are interleaved round by round (one sitting); each run gets a fresh state dir, so the workers case launches
the demo workers anew (``descendants_at_end`` says they ran). Prints medians and ratios as JSON.

    .venv/bin/python bench/tui_cpu_host.py --rounds 3 --seconds 30 --procs 2000

``--baseline DIR`` also measures the read-only and workers cases of another checkout of the code (``git archive REV |
tar -x -C DIR``), run through the same console script with ``PYTHONPATH=DIR``, in the same rounds: a before/after in
one sitting.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from page_touch import page_cost_us
from tui_cpu import hot_set_readable, measure

AMDTOP = str(Path(sys.executable).with_name("amdtop"))
FLOOR = Path(__file__).resolve().with_name("textual_floor.py")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--warmup", type=float, default=8.0)
    ap.add_argument("--procs", type=int, default=2000, help="0: skip the cases with sleeping processes")
    ap.add_argument("--size", default="200x50")
    ap.add_argument("--baseline", default=None, help="another checkout of the code, measured as a peer")
    ap.add_argument(
        "--demo-port-base",
        type=int,
        default=None,
        help="ports of the demo workers (default 18080): another session's demo on 18080-18082 makes the gate refuse"
        " the launches, and the workers case then runs without workers",
    )
    a = ap.parse_args()
    cols, rows = (int(x) for x in a.size.split("x"))
    results: dict[str, list[dict[str, object]]] = {}
    sleepers: list[subprocess.Popen[bytes]] = []

    def amdtop(readonly: bool, code: str | None = None) -> list[str]:
        state = tempfile.mkdtemp(prefix="amdtop-cpu-")
        if a.demo_port_base is not None:
            # The demo's profile file, written before amdtop starts, is the one it uses (ensure_demo_profiles).
            from amdtop.supervisor.demo import ensure_demo_profiles
            from amdtop.telemetry.sim import SimBackend

            ensure_demo_profiles(Path(state), SimBackend().topology(), port_base=a.demo_port_base)
        argv = [AMDTOP, "--demo", "--interval", "1", "--state-dir", state, "--config", f"{state}/none.toml"]
        if code is not None:
            argv = ["env", f"PYTHONPATH={code}", *argv]  # env execs: the measured pid is amdtop's
        return [*argv, "--readonly"] if readonly else argv

    page_us = [page_cost_us(1.0)]
    try:
        for _ in range(a.rounds):
            for busy in (False, True) if a.procs else (False,):
                if busy:
                    sleepers = [subprocess.Popen(["sleep", "3600"]) for _ in range(a.procs)]
                suffix = f"+{a.procs}procs" if busy else ""
                for name, argv in (("readonly", amdtop(True)), ("workers", amdtop(False))):
                    run = measure(argv, "amdtop", cols, rows, a.warmup, a.seconds, self_only=True)
                    results.setdefault(name + suffix, []).append(run)
                    print(name + suffix, json.dumps(run), file=sys.stderr)
                if not busy and a.baseline:
                    for name, argv in (
                        ("baseline readonly", amdtop(True, a.baseline)),
                        ("baseline workers", amdtop(False, a.baseline)),
                    ):
                        run = measure(argv, "amdtop", cols, rows, a.warmup, a.seconds, self_only=True)
                        results.setdefault(name, []).append(run)
                        print(name, json.dumps(run), file=sys.stderr)
                if not busy:
                    run = measure(["top", "-d", "1"], "load average", cols, rows, a.warmup, a.seconds)
                    results.setdefault("top -d 1", []).append(run)
                    print("top", json.dumps(run), file=sys.stderr)
                    # The floor under any Textual dashboard on this VM in this round: its speed drifts by up to 10x
                    # between sittings, and the floor drifts with it.
                    run = measure(
                        [sys.executable, str(FLOOR)], "backend", cols, rows, a.warmup, a.seconds, self_only=True
                    )
                    results.setdefault("textual floor", []).append(run)
                    print("floor", json.dumps(run), file=sys.stderr)
                for p in sleepers:
                    p.kill()
                for p in sleepers:
                    p.wait()
                sleepers = []
    finally:
        for p in sleepers:
            p.kill()

    page_us.append(page_cost_us(1.0))

    def med(name: str, key: str) -> float:
        return statistics.median(float(r[key]) for r in results[name])  # type: ignore[arg-type]

    suffix_busy = f"+{a.procs}procs"
    if not a.procs:  # --procs 0: the host as it is, no suffix_busy cases
        results[f"readonly{suffix_busy}"], results[f"workers{suffix_busy}"] = results["readonly"], results["workers"]
    out = {
        "cpu_pct_one_core": {k: round(med(k, "cpu_pct_one_core"), 3) for k in results},
        "tty_bytes_per_s": {k: round(med(k, "tty_bytes_per_s")) for k in results},
        "vm_us_per_page_after_1s": [round(x, 2) for x in page_us],
        "workers_seen": {k: [r["descendants_at_end"] for r in v] for k, v in results.items()},
        "ratios": {
            "workers/readonly": round(med("workers", "cpu_pct_one_core") / med("readonly", "cpu_pct_one_core"), 2),
            f"readonly{suffix_busy}/readonly": round(
                med(f"readonly{suffix_busy}", "cpu_pct_one_core") / med("readonly", "cpu_pct_one_core"), 2
            ),
            f"workers{suffix_busy}/workers": round(
                med(f"workers{suffix_busy}", "cpu_pct_one_core") / med("workers", "cpu_pct_one_core"), 2
            ),
            "workers bytes/top bytes": round(med("workers", "tty_bytes_per_s") / med("top -d 1", "tty_bytes_per_s"), 2),
            "readonly/textual floor": round(
                med("readonly", "cpu_pct_one_core") / med("textual floor", "cpu_pct_one_core"), 2
            ),
            "workers/textual floor": round(
                med("workers", "cpu_pct_one_core") / med("textual floor", "cpu_pct_one_core"), 2
            ),
        },
    }
    if hot_set_readable():
        # Memory the process touches each second, beside what this VM charged per page touched a second after the
        # last touch (bench/page_touch.py): CPU varies with the second, the first does not.
        out["hot_kib_per_s"] = {k: round(med(k, "hot_kib_per_s")) for k in results}
        out["ratios"].update(  # type: ignore[attr-defined]
            {
                "hot set workers/readonly": round(
                    med("workers", "hot_kib_per_s") / med("readonly", "hot_kib_per_s"), 2
                ),
                "hot set readonly/textual floor": round(
                    med("readonly", "hot_kib_per_s") / med("textual floor", "hot_kib_per_s"), 2
                ),
            }
        )
    if a.baseline:
        out["ratios"].update(  # type: ignore[attr-defined]
            {
                f"{k}/baseline {k}": round(med(k, "cpu_pct_one_core") / med(f"baseline {k}", "cpu_pct_one_core"), 2)
                for k in ("readonly", "workers")
            }
        )
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
