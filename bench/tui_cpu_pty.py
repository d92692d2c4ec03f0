"""CPU use of a terminal program in a pseudo-terminal of a given size, from /proc CPU ticks.

Spawns the command in a pty (``TERM=xterm-256color``), drains its output as a terminal would, skips a warm-up,
then counts user+system ticks of the process and its descendants over ``--seconds``. Prints one JSON line:
``cpu_pct_one_core`` is CPU seconds over wall seconds x 100.

    python3 bench/tui_cpu_pty.py --label amdtop --seconds 60 -- amdtop --backend nvml --interval 1
    python3 bench/tui_cpu_pty.py --label nvitop --seconds 60 -- nvitop --interval 1
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import pty
import select
import signal
import struct
import sys
import termios
import time

TICK = os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> tuple[int, int] | None:
    """(ppid, utime+stime ticks) of ``pid``."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            text = fh.read()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()
    return int(fields[1]), int(fields[11]) + int(fields[12])


def tree_ticks(root: int) -> int:
    """CPU ticks of ``root`` and every live descendant."""
    stats = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            s = _stat(int(entry))
            if s:
                stats[int(entry)] = s
    total, todo, seen = 0, [root], set()
    while todo:
        pid = todo.pop()
        if pid in seen or pid not in stats:
            continue
        seen.add(pid)
        total += stats[pid][1]
        todo += [p for p, (pp, _) in stats.items() if pp == pid]
    return total


def drain(fd: int, until: float, keep: bytearray) -> int:
    """Read what the program writes until ``until``; keep the last 256 KiB in ``keep``."""
    n = 0
    while True:
        left = until - time.monotonic()
        if left <= 0:
            return n
        r, _, _ = select.select([fd], [], [], min(left, 0.2))
        if r:
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                return n
            n += len(chunk)
            keep += chunk
            del keep[: max(0, len(keep) - 262144)]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--label", required=True)
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--warmup", type=float, default=5.0)
    ap.add_argument("--cols", type=int, default=200)
    ap.add_argument("--rows", type=int, default=50)
    ap.add_argument("--expect", default=None, help="text that must appear on screen (proves it drew real data)")
    ap.add_argument("--save", default=None, help="write the last 256 KiB of terminal output here")
    ap.add_argument("cmd", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    pid, fd = pty.fork()
    if pid == 0:
        os.environ["TERM"] = "xterm-256color"
        os.environ["COLUMNS"], os.environ["LINES"] = str(args.cols), str(args.rows)
        os.execvp(cmd[0], cmd)
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", args.rows, args.cols, 0, 0))
    start = time.monotonic()
    keep = bytearray()
    drain(fd, start + args.warmup, keep)
    t0, c0 = time.monotonic(), tree_ticks(pid)
    nbytes = drain(fd, t0 + args.seconds, keep)
    t1, c1 = time.monotonic(), tree_ticks(pid)
    alive = os.waitpid(pid, os.WNOHANG) == (0, 0)
    os.kill(pid, signal.SIGTERM)
    drain(fd, time.monotonic() + 1.0, bytearray())
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    try:
        os.waitpid(pid, 0)
    except ChildProcessError:
        pass
    cpu_s = (c1 - c0) / TICK
    out = {
        "label": args.label,
        "cmd": cmd,
        "size": f"{args.cols}x{args.rows}",
        "wall_s": round(t1 - t0, 2),
        "cpu_s": cpu_s,
        "cpu_pct_one_core": round(100.0 * cpu_s / (t1 - t0), 3),
        "output_bytes": nbytes,
        "alive_at_end": alive,
        "expect_seen": None if args.expect is None else args.expect.encode() in keep,
    }
    if args.save:
        with open(args.save, "wb") as fh:
            fh.write(bytes(keep))
    print(json.dumps(out), flush=True)
    return 0 if alive else 1


if __name__ == "__main__":
    sys.exit(main())
