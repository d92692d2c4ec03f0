"""Dashboard cost over SSH: CPU and terminal bytes/s of a terminal program at steady state, and its first paint.

Runs the command in a pseudo-terminal of the given size (``TERM=xterm-256color``), drains its output like a terminal,
records when ``--marker`` first appears in the output (first full paint: amdtop writes its status line, with the
backend name, in the same batched update as every pane; the marker also proves the screen drew real data), waits
``--warmup`` seconds, then counts user+system CPU ticks of the process tree (and, where the kernel keeps schedstat,
its threads' nanoseconds on a CPU: the ticks' 10 ms grain is a tenth of an idle dashboard's 20 s window) and the bytes
written to the tty (what SSH carries before compression) over ``--seconds``. Repeats ``--runs`` times, interleaving ``--peer`` commands
measured the same way, and prints medians (JSON on stdout, per-run JSON lines on stderr, a Markdown table with
``--markdown``). ``--save DIR`` keeps each run's last 256 KiB of terminal output. (This merges the former
``tui_cpu_pty.py``, whose single runs are ``--runs 1``.)

    .venv/bin/python bench/tui_cpu.py --runs 3 --seconds 60 --peer "top -d 1" --markdown \\
        -- .venv/bin/amdtop --demo --interval 1
    python3 bench/tui_cpu.py --marker nvml --peer 'python3 -m nvitop --interval 1' --peer-marker H200 \\
        -- python3 -m tui --backend nvml --interval 1

Options go before ``--``; everything after it is the measured command.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import pty
import select
import shlex
import signal
import statistics
import struct
import subprocess
import sys
import termios
import time
from typing import Any

TICK = os.sysconf("SC_CLK_TCK")


def _ppid_ticks(pid: int) -> tuple[int, int] | None:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            text = fh.read()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()
    return int(fields[1]), int(fields[11]) + int(fields[12])


def tree_ticks(root: int) -> int:
    """utime+stime ticks of ``root`` and its live descendants."""
    stats = {int(e): s for e in os.listdir("/proc") if e.isdigit() and (s := _ppid_ticks(int(e)))}
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in stats.items():
        children.setdefault(ppid, []).append(pid)
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        if pid in stats:
            total += stats[pid][1]
            todo.extend(children.get(pid, ()))
    return total


class PtyRun:
    def __init__(self, argv: list[str], cols: int, rows: int, cpu: int | None = None) -> None:
        """``cpu``: the one CPU the program and everything it starts run on (``None``: wherever the kernel puts them)."""
        self.master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
        env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
        env["TERM"] = "xterm-256color"
        self.start = time.monotonic()
        self.proc = subprocess.Popen(
            argv,
            stdin=slave,
            stdout=slave,
            stderr=slave,
            env=env,
            start_new_session=True,
            close_fds=True,
            preexec_fn=None if cpu is None else lambda: os.sched_setaffinity(0, {cpu}),
        )
        os.close(slave)
        self.buf = b""
        self.bytes = 0
        self.tail = bytearray()
        """The last 256 KiB written (for ``--save``)."""

    def pump(self, timeout: float) -> None:
        """Read whatever the program wrote within ``timeout`` seconds (a terminal never stops reading)."""
        end = time.monotonic() + timeout
        while True:
            left = end - time.monotonic()
            if left <= 0:
                return
            ready, _, _ = select.select([self.master], [], [], left)
            if not ready:
                return
            try:
                data = os.read(self.master, 65536)
            except OSError:
                return
            if not data:
                return
            self.bytes += len(data)
            self.buf = (self.buf + data)[-65536:]
            self.tail += data
            del self.tail[: max(0, len(self.tail) - 262144)]

    def stop(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(5)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait()
        os.close(self.master)


def tree_size(root: int) -> int:
    """Live descendants of ``root`` (the demo's simulated workers under amdtop)."""
    stats = {int(e): s for e in os.listdir("/proc") if e.isdigit() and (s := _ppid_ticks(int(e)))}
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in stats.items():
        children.setdefault(ppid, []).append(pid)
    count, todo = 0, list(children.get(root, ()))
    while todo:
        pid = todo.pop()
        count += 1
        todo.extend(children.get(pid, ()))
    return count


def tree_rss_kib(root: int) -> int:
    """Resident KiB of ``root`` and its live descendants (``/proc/PID/statm``, what ps and psutil report as RSS)."""
    page_kib = os.sysconf("SC_PAGE_SIZE") // 1024
    pids = [root]
    stats = {int(e): s for e in os.listdir("/proc") if e.isdigit() and (s := _ppid_ticks(int(e)))}
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in stats.items():
        children.setdefault(ppid, []).append(pid)
    total, todo = 0, pids
    while todo:
        pid = todo.pop()
        try:
            with open(f"/proc/{pid}/statm") as fh:
                total += int(fh.read().split()[1]) * page_kib
        except (OSError, IndexError, ValueError):
            continue
        todo.extend(children.get(pid, ()))
    return total


def tree_pids(root: int) -> list[int]:
    """``root`` and its live descendants."""
    stats = {int(e): s for e in os.listdir("/proc") if e.isdigit() and (s := _ppid_ticks(int(e)))}
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in stats.items():
        children.setdefault(ppid, []).append(pid)
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        if pid in stats:
            out.append(pid)
            todo.extend(children.get(pid, ()))
    return out


def sched_ns(pids: list[int]) -> dict[tuple[int, int], int] | None:
    """Nanoseconds on a CPU of each thread of ``pids`` (``/proc/PID/task/TID/schedstat``'s first field; None where
    the kernel keeps no schedstat). A 20 s window of an idle dashboard is 9-17 clock ticks, so the ticks alone cannot
    tell 0.45 % from 0.5 %; these can."""
    out: dict[tuple[int, int], int] = {}
    for pid in pids:
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                with open(f"/proc/{pid}/task/{tid}/schedstat") as fh:
                    out[(pid, int(tid))] = int(fh.read().split()[0])
            except (OSError, IndexError, ValueError):
                if not os.path.exists("/proc/self/schedstat"):
                    return None
    return out


def sched_delta_s(before: dict[tuple[int, int], int] | None, after: dict[tuple[int, int], int] | None) -> float | None:
    """CPU seconds between two :func:`sched_ns` readings (threads born in between count from zero; threads that died
    are lost, as in the tick count)."""
    if before is None or after is None:
        return None
    return sum(ns - before.get(key, 0) for key, ns in after.items()) / 1e9


def self_ticks(root: int) -> int:
    """utime+stime ticks of ``root`` alone."""
    found = _ppid_ticks(root)
    return 0 if found is None else found[1]


def hot_kib(pid: int) -> int | None:
    """KiB of ``pid``'s memory referenced since its last ``clear_refs`` (None where the kernel does not say)."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as fh:
            for line in fh:
                if line.startswith("Referenced:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def clear_refs(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/clear_refs", "w") as fh:
            fh.write("1")
    except OSError:
        return False
    return True


def hot_set_readable() -> bool:
    """Whether this kernel lets us clear and read a process's referenced pages (tried on ourselves)."""
    return clear_refs(os.getpid()) and hot_kib(os.getpid()) is not None


def measure(
    argv: list[str],
    marker: str,
    cols: int,
    rows: int,
    warmup: float,
    seconds: float,
    save: str | None = None,
    self_only: bool = False,
) -> dict[str, Any]:
    run = PtyRun(argv, cols, rows)
    try:
        paint = None
        while time.monotonic() - run.start < 30:
            run.pump(0.02)
            if marker.encode() in run.buf:
                paint = time.monotonic() - run.start
                break
            if run.proc.poll() is not None:
                raise SystemExit(f"{argv[0]} exited early: {run.buf[-400:]!r}")
        run.pump(warmup)
        ticks = self_ticks if self_only else tree_ticks
        pids = (lambda pid: [pid]) if self_only else tree_pids
        t0, c0, b0 = time.monotonic(), ticks(run.proc.pid), run.bytes
        s0 = sched_ns(pids(run.proc.pid))
        hot: list[int] = []
        while time.monotonic() - t0 < seconds:
            # The hot set: memory the process touches in each second (the pages a 1 Hz dashboard keeps warm). On
            # this project's VMs CPU grows with it at a cost per page that varies by the hour (bench/page_touch.py).
            cleared = clear_refs(run.proc.pid)
            step = min(1.0, seconds - (time.monotonic() - t0))
            run.pump(step)
            if cleared and step >= 1.0 and (kib := hot_kib(run.proc.pid)) is not None:
                hot.append(kib)
        wall = time.monotonic() - t0
        cpu = (ticks(run.proc.pid) - c0) / TICK
        sched = sched_delta_s(s0, sched_ns(pids(run.proc.pid)))
        descendants = tree_size(run.proc.pid)
        rss_kib = tree_rss_kib(run.proc.pid)
        with open(f"/proc/{run.proc.pid}/statm") as fh:
            self_rss_kib = int(fh.read().split()[1]) * (os.sysconf("SC_PAGE_SIZE") // 1024)
        if save:
            with open(save, "wb") as fh:
                fh.write(bytes(run.tail))
        return {
            "first_paint_s": paint,
            "cpu_pct_one_core": 100.0 * cpu / wall,
            "cpu_pct_sched": None if sched is None else 100.0 * sched / wall,
            "tty_bytes_per_s": (run.bytes - b0) / wall,
            "hot_kib_per_s": statistics.median(hot) if hot else None,
            "rss_mib_at_end": rss_kib / 1024,  # the process and its descendants (a dashboard's workers too)
            "self_rss_mib_at_end": self_rss_kib / 1024,
            "marker_seen": paint is not None,
            "alive_at_end": run.proc.poll() is None,
            "descendants_at_end": descendants,
        }
    finally:
        run.stop()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=60.0, help="steady-state window per run")
    ap.add_argument("--warmup", type=float, default=5.0, help="seconds after first paint before counting CPU")
    ap.add_argument("--size", default="200x50", help="terminal COLSxROWS")
    ap.add_argument("--marker", default="backend ", help="text whose first appearance marks the first full paint")
    ap.add_argument("--label", default="amdtop")
    ap.add_argument("--peer", action="append", default=[], help="peer command (shell-quoted), measured interleaved")
    ap.add_argument("--peer-marker", action="append", default=[], help="marker for each --peer (default: any output)")
    ap.add_argument("--peer-label", action="append", default=[], help="label for each --peer (default: its argv[0])")
    ap.add_argument("--markdown", action="store_true", help="also print a Markdown table of medians")
    ap.add_argument("--save", default=None, help="folder for each run's last 256 KiB of terminal output")
    ap.add_argument("cmd", nargs=argparse.REMAINDER, help="-- COMMAND... (the program to measure)")
    args = ap.parse_args()
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd:
        ap.error("give the command after --")
    cols, rows = (int(x) for x in args.size.lower().split("x"))
    targets = [(args.label, cmd, args.marker)]
    for i, peer in enumerate(args.peer):
        marker = args.peer_marker[i] if i < len(args.peer_marker) else ""
        label = args.peer_label[i] if i < len(args.peer_label) else shlex.split(peer)[0].rsplit("/", 1)[-1]
        targets.append((label, shlex.split(peer), marker))
    results: dict[str, list[dict[str, Any]]] = {label: [] for label, _, _ in targets}
    if args.save:
        os.makedirs(args.save, exist_ok=True)
    for run in range(args.runs):
        for label, argv, marker in targets:
            save = os.path.join(args.save, f"{label}_screen_{run}.bin") if args.save else None
            r = measure(argv, marker, cols, rows, args.warmup, args.seconds, save)
            results[label].append(r)
            print(json.dumps({"label": label, **r}), file=sys.stderr)
    summary = {}
    for label, runs in results.items():
        summary[label] = {
            key: statistics.median(r[key] for r in runs if r[key] is not None)
            for key in (
                "first_paint_s",
                "cpu_pct_one_core",
                "cpu_pct_sched",
                "tty_bytes_per_s",
                "hot_kib_per_s",
                "rss_mib_at_end",
            )
            if any(r[key] is not None for r in runs)
        }
    base = summary[args.label]
    doc = {
        "command": shlex.join(cmd),
        "size": args.size,
        "runs": args.runs,
        "seconds": args.seconds,
        "medians": summary,
        "cpu_ratio_vs_" + args.label: {
            k: v["cpu_pct_one_core"] / base["cpu_pct_one_core"] for k, v in summary.items() if base["cpu_pct_one_core"]
        },
        "sched_ratio_vs_" + args.label: {
            k: v["cpu_pct_sched"] / base["cpu_pct_sched"]
            for k, v in summary.items()
            if base.get("cpu_pct_sched") and v.get("cpu_pct_sched") is not None
        },
    }
    print(json.dumps(doc, indent=2))
    if args.markdown:
        print(
            "| program | CPU % of one core (median) | CPU % from schedstat (median) | first paint s (median) |"
            " tty bytes/s (median) | RSS MiB (median) |"
        )
        print("|---|---|---|---|---|---|")
        for label, m in summary.items():
            paint = m.get("first_paint_s")
            sched = m.get("cpu_pct_sched")
            print(
                f"| {label} | {m['cpu_pct_one_core']:.2f} | {'-' if sched is None else f'{sched:.3f}'} |"
                f" {'-' if paint is None else f'{paint:.2f}'} |"
                f" {m['tty_bytes_per_s']:.0f} | {m.get('rss_mib_at_end', 0):.1f} |"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
