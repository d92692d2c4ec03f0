"""A viewer that calls ``wake`` in a loop, and what it costs the serve: wakes answered a second, the serve's CPU over
the window, and the node's polls (issue 52 item 15 rate-limited the polls; issue 53 made the serve hold the wakes
inside the gap instead of answering them at once).

    python3 bench/replay_serve.py tests/fixtures/nvml/h200_health_idle_replay.json -- --state-dir /tmp/wf \\
        --listen 127.0.0.1:19570 --config /tmp/none.toml --interval 1 &
    python3 bench/wake_flood.py /tmp/wf --seconds 10            # each wake waits for its answer
    python3 bench/wake_flood.py /tmp/wf --seconds 10 --no-wait  # sent without waiting (a stats call every 16)

The serve's CPU is its user+system clock ticks from ``/proc`` (the process found by the state dir's lock).
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from amdtop.serve import lock
from amdtop.serve.client import ServeClient, ServeGone


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("state_dir", type=Path)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--no-wait", action="store_true", help="send wakes without waiting for their answers")
    a = ap.parse_args()
    pid = lock.holder(a.state_dir)
    if not pid:
        raise SystemExit(f"no serve runs for {a.state_dir}")
    client = ServeClient(a.state_dir, readonly=True, timeout=30)
    polls = client.call("stats")["polls"]
    started, cpu0, sent, end = time.monotonic(), _cpu_s(pid), 0, "ran"
    try:
        while time.monotonic() - started < a.seconds:
            if a.no_wait:
                client.call_async("wake")
                if sent % 16 == 15:
                    client.call("stats", timeout=30)
            else:
                client.call("wake", timeout=30)
            sent += 1
    except ServeGone as exc:
        end = f"dropped by the serve ({exc})"
    took = time.monotonic() - started
    cpu = 100 * (_cpu_s(pid) - cpu0) / took
    polled = "-" if client.gone else client.call("stats")["polls"] - polls
    print(f"{sent / took:.0f} wakes/s for {took:.1f} s ({end}); serve CPU {cpu:.1f} % of a core; polls {polled}")
    client.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
