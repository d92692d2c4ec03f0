"""CPU of several terminal programs run AT THE SAME TIME, each in its own pseudo-terminal, over the same windows: the
ratio of two idle dashboards read this way moves far less than between the interleaved runs of ``tui_cpu.py``, whose
programs each get a different 20 s of a VM whose cost per touched page changes by the minute (docs/benchmarks.md).
Each program is idle most of the time (well under 1 % of a core), so on two cores they do not crowd each other out.

    .venv/bin/python bench/side_by_side.py --windows 6 --seconds 30 \\
        --run inproc nvml ".venv/bin/python bench/replay_tui.py tests/fixtures/nvml/h200_replay.json -- --no-attach \\
              --readonly --interval 1 --state-dir /tmp/sbs-i --config /tmp/none.toml" \\
        --run pair attached "env SERVE='.venv/bin/python bench/replay_serve.py tests/fixtures/nvml/h200_replay.json \\
              --' VIEWER='.venv/bin/python -m tui' bench/serve_pair.sh /tmp/sbs-p 127.0.0.1:19417 \\
              --config /tmp/none.toml --interval 1"

``--run LABEL MARKER COMMAND`` (shell-quoted; the first is the reference): the program's whole process tree is
counted (each thread's schedstat), from ``--warmup`` seconds after every program showed its marker. Prints each
window's CPU % and ratio to the reference, then the medians (JSON with ``--json``).
"""

from __future__ import annotations

import argparse
import json
import os
import select
import shlex
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from tui_cpu import PtyRun, sched_delta_s, sched_ns, tree_pids


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run", nargs=3, action="append", metavar=("LABEL", "MARKER", "COMMAND"), required=True)
    ap.add_argument("--windows", type=int, default=6)
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--warmup", type=float, default=5.0)
    ap.add_argument("--size", default="200x50")
    ap.add_argument("--json", action="store_true")
    ap.add_argument(
        "--threads",
        action="store_true",
        help="also each program's CPU by part: per process (the serve, the UI), its main thread and the rest",
    )
    ap.add_argument(
        "--pin",
        metavar="CPUS",
        help="comma-separated CPUs: this harness runs on the first, each program (with all it starts) on the next one "
        "in --run order; where the kernel places each program otherwise moves its CPU by 5-15 %% (session 20)",
    )
    a = ap.parse_args()
    cols, rows = (int(x) for x in a.size.split("x"))
    cpus: list[int | None] = [None] * (len(a.run) + 1)
    if a.pin:
        cpus = [int(c) for c in a.pin.split(",")]
        if len(cpus) != len(a.run) + 1:
            raise SystemExit(f"--pin: {len(a.run) + 1} CPUs needed (this harness, then one per --run)")
        os.sched_setaffinity(0, {cpus[0]})
    runs = [
        (label, marker, PtyRun(shlex.split(cmd), cols, rows, cpus[i + 1]))
        for i, (label, marker, cmd) in enumerate(a.run)
    ]
    try:
        waiting = {label for label, _, _ in runs}
        deadline = time.monotonic() + 60
        while waiting and time.monotonic() < deadline:
            for label, marker, run in runs:
                run.pump(0.01)
                if marker.encode() in run.buf:
                    waiting.discard(label)
                elif run.proc.poll() is not None:
                    raise SystemExit(f"{label} exited early: {run.buf[-400:]!r}")
        if waiting:
            raise SystemExit(f"no marker from {sorted(waiting)} in 60 s")
        _pump_all(runs, a.warmup)
        windows: list[dict[str, float]] = []
        parts: list[dict[str, float]] = []
        for _ in range(a.windows):
            before = {label: sched_ns(tree_pids(run.proc.pid)) for label, _, run in runs}
            t0 = time.monotonic()
            _pump_all(runs, a.seconds)
            wall = time.monotonic() - t0
            window = {}
            part: dict[str, float] = {}
            for label, _, run in runs:
                after = sched_ns(tree_pids(run.proc.pid))
                cpu = sched_delta_s(before[label], after)
                if cpu is None or after is None:
                    raise SystemExit("this kernel keeps no schedstat")
                window[label] = 100.0 * cpu / wall
                if a.threads:
                    for (pid, tid), ns in after.items():
                        key = f"{label} {_role(pid)} {'main' if pid == tid else 'other threads'}"
                        part[key] = part.get(key, 0.0) + 100.0 * (ns - before[label].get((pid, tid), 0)) / 1e9 / wall
            windows.append(window)
            parts.append(part)
            ref = window[runs[0][0]]
            print(
                "  ".join(f"{k} {v:.3f} % ({v / ref:.3f}x)" for k, v in window.items()),
                file=sys.stderr,
                flush=True,
            )
    finally:
        for _, _, run in runs:
            run.stop()
    ref_label = runs[0][0]
    summary = {
        label: {
            "cpu_pct_median": statistics.median(w[label] for w in windows),
            "ratio_median": statistics.median(w[label] / w[ref_label] for w in windows),
            "ratios": [round(w[label] / w[ref_label], 3) for w in windows],
        }
        for label, _, _ in runs
    }
    if a.threads:
        keys = sorted({k for p in parts for k in p})
        summary["threads"] = {k: round(statistics.median(p.get(k, 0.0) for p in parts), 4) for k in keys}  # type: ignore[assignment]
    if a.json:
        print(json.dumps(summary, indent=2))
    else:
        for label, s in summary.items():
            if label == "threads":
                for k, v in s.items():
                    print(f"  {k}: {v:.4f} %")
                continue
            print(
                f"{label:12} {s['cpu_pct_median']:.3f} % of a core (median of {len(windows)} windows); "
                f"x {ref_label}: median {s['ratio_median']:.3f}, per window {s['ratios']}"
            )
    return 0


def _role(pid: int) -> str:
    """What a process of a program is, from its argv: the serve, the terminal UI, or a wrapper (a shell)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            argv = fh.read().split(b"\0")
    except OSError:
        return "gone"
    text = b" ".join(argv).decode(errors="replace")
    if "serve" in text and "serve_pair" not in text:
        return "serve"
    return "ui" if "python" in text else "other"


def _pump_all(runs: list[tuple[str, str, PtyRun]], seconds: float) -> None:
    """Drain every program's terminal for ``seconds`` (a terminal never stops reading), waking only when one wrote."""
    by_fd = {run.master: run for _, _, run in runs}
    end = time.monotonic() + seconds
    while (left := end - time.monotonic()) > 0:
        ready, _, _ = select.select(list(by_fd), [], [], left)
        for fd in ready:
            by_fd[fd].pump(0.001)
            if by_fd[fd].proc.poll() is not None:
                raise SystemExit(f"{by_fd[fd].proc.args[0]} exited: {by_fd[fd].buf[-400:]!r}")


if __name__ == "__main__":
    raise SystemExit(main())
