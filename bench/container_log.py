"""Cost of following a container runtime's log (decoded as read) against the same lines in a plain file, same run.

Usage: PYTHONPATH=$PWD .venv/bin/python bench/container_log.py [--lines 200000] [--runs 5]
The log is the parse-rate bench's mix (tests/fixtures/rccl/make_logs.py: 8-rank RCCL inits, 16 channels, an error
block every 50 inits, 100 vLLM INFO lines per init), written three ways: a plain file, Docker's json-file
(``{"log": line + "\\n", "stream": "stdout", "time": ...}`` per line, moby jsonfilelog) and the CRI format (``TIME
stdout F line``). For each, a LogMonitor (the Logs pane's reader: tail, decode, parse) follows the file from its start
until every line is handed over; the tail alone (LogFollower) is timed too. Runs alternate the three; medians, and
each format's time over the plain file's (on a shared CPU only the ratio is meaningful).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from amdtop.logread.rccl.monitor import LogMonitor  # noqa: E402
from amdtop.logread.rccl.tail import LogFollower  # noqa: E402

CID = "0123456789ab" * 5 + "cdef"
STAMP = "2026-12-07T04:20:00.123456789Z"


def mix(n: int) -> list[str]:
    from tests.fixtures.rccl.make_logs import rccl_rank_lines

    lines: list[str] = []
    k = 0
    while len(lines) < n:
        for r in range(8):
            lines += rccl_rank_lines(r, 8, nchannels=16, comm_id=f"0x{k:016x}", errors=(k % 50 == 0 and r == 3))
        lines += [f"INFO 07-20 17:27:{k % 60:02d} metrics.py:351] Avg prompt throughput: 0.0 tokens/s"] * 100
        k += 1
    return lines[:n]


def write(root: Path, lines: list[str]) -> dict[str, tuple[Path, str]]:
    plain = root / "plain.log"
    docker = root / "docker" / CID / f"{CID}-json.log"
    cri = root / "containers" / f"vllm-0_default_vllm-{CID}.log"
    docker.parent.mkdir(parents=True)
    cri.parent.mkdir(parents=True)
    out = {
        "plain": (plain, "".join(f"{t}\n" for t in lines)),
        "docker json-file": (
            docker,
            "".join(json.dumps({"log": t + "\n", "stream": "stdout", "time": STAMP}) + "\n" for t in lines),
        ),
        "CRI": (cri, "".join(f"{STAMP} stdout F {t}\n" for t in lines)),
    }
    return out


def follow(path: Path, text: str, n: int, monitor: bool) -> float:
    """Seconds from the file's appearance until all ``n`` lines were handed over (read from its start)."""
    if path.exists():
        path.unlink()
    reader: LogMonitor | LogFollower
    # no per-poll bound (a follower further behind than max_bytes skips ahead, counting): every line is read
    tail = LogFollower([("w", path)], max_lines=10**8, max_bytes=1 << 30)
    if monitor:
        reader = LogMonitor([("w", path)])
        reader.follower = tail
        poll: Callable[[], object] = reader.poll
    else:
        reader = tail
        poll = reader.poll
    poll()  # the file does not exist yet: it is read from its start once it does
    path.write_text(text)
    got = 0
    t0 = time.perf_counter()
    while got < n:
        update = poll()
        got += len(update.lines)  # type: ignore[attr-defined]
    took = time.perf_counter() - t0
    reader.close()
    return took


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lines", type=int, default=200_000)
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    lines = mix(args.lines)
    with tempfile.TemporaryDirectory() as tmp:
        files = write(Path(tmp), lines)
        for monitor in (False, True):
            times: dict[str, list[float]] = {k: [] for k in files}
            for _ in range(args.runs):
                for name, (path, text) in files.items():
                    times[name].append(follow(path, text, len(lines), monitor))
            base = statistics.median(times["plain"])
            what = "LogMonitor (tail + decode + parse)" if monitor else "LogFollower (tail + decode)"
            print(f"{what}, {len(lines):,} lines, median of {args.runs}:")
            for name, (_path, text) in files.items():
                med = statistics.median(times[name])
                print(
                    f"  {name:17s} {len(text) / 1e6:6.1f} MB  {med:7.3f} s  {len(lines) / med:>10,.0f} lines/s"
                    f"  x{med / base:.2f} of plain"
                )


if __name__ == "__main__":
    main()
