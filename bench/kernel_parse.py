"""Kernel-log fault parsing rate: the parser alone and the whole monitor (read a file from its start, parse, map to
GPUs) on a generated ~20 MB kernel log, next to ``grep -cE`` with the same fault phrases in the same run.

Usage: .venv/bin/python bench/kernel_parse.py [--mb 20] [--runs 5]
       .venv/bin/python bench/kernel_parse.py --idle-polls 2000   (per-tick cost with nothing new)
The log is what a busy GPU host's kernel ring holds: network, audit, systemd and amdgpu housekeeping lines (ring/VM
engine lines, SMU messages: they pass the device prefix and try every fault pattern, the parser's slow path), with
the real fault reports of tests/fixtures/kernel/ (page faults with their status lines, timeouts, resets, RAS, Xids)
every 2000 lines. Only ratios within one run mean anything on a shared CPU.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

NOISE = (
    "[{t:12.6f}] mlx5_core 0000:ab:00.0 mlx5_5: Port: 1 Link ACTIVE",
    '[{t:12.6f}] audit: type=1400 audit(1786153796.740:114): apparmor="ALLOWED" operation="open" profile="x"',
    "[{t:12.6f}] amdgpu 0000:c6:00.0: amdgpu: ring comp_1.{k}.1 uses VM inv eng 9 on hub 0",
    "[{t:12.6f}] amdgpu 0000:05:00.0: amdgpu: SMU is resumed successfully!",
    "[{t:12.6f}] EXT4-fs (md127p3): re-mounted r/w. Quota mode: none.",
    "[{t:12.6f}] workqueue: ib_cache_event_task [ib_core] hogged CPU for >10000us 4 times",
    "[{t:12.6f}] [drm] PCIE GART of 512M enabled (table at 0x0000008000300000).",
    "[{t:12.6f}] nvme nvme0: I/O 512 QID 7 timeout, reset controller",
)
GREP = "page fault|timeout, signaled|GPU reset begin|uncorrectable hardware|Poison|NVRM: Xid|HW Exception|fallen off"


def generate(path: Path, mb: int) -> int:
    faults: list[str] = []
    for f in sorted((ROOT / "tests" / "fixtures" / "kernel").glob("*.log")):
        faults += f.read_text().splitlines()[1:]
    out: list[str] = []
    size = n = 0
    t = 100.0
    while size < mb * 1_000_000:
        for k in range(2000):
            line = NOISE[k % len(NOISE)].format(t=t, k=k % 4)
            out.append(line)
            size += len(line) + 1
            t += 0.001
        out += faults
        size += sum(len(x) + 1 for x in faults)
    n = len(out)
    path.write_text("\n".join(out) + "\n")
    return n


def parser_run(lines: list[str]) -> tuple[float, int]:
    from amdtop.logread.kernel.parser import KernelLogParser

    p = KernelLogParser()
    t0 = time.perf_counter()
    found = 0
    for line in lines:
        found += len(p.feed(line))
    found += len(p.flush())
    return time.perf_counter() - t0, found


def monitor_run(path: Path) -> tuple[float, int]:
    from amdtop.logread.kernel.monitor import KernelFaultMonitor
    from amdtop.telemetry.sim import SimBackend

    topology = SimBackend().topology()
    t0 = time.perf_counter()
    mon = KernelFaultMonitor(path)
    total = 0
    while True:  # a 64 MB read cap per poll: one poll for 20 MB
        update = mon.poll(topology)
        if update.status.lines == total:
            break
        total = update.status.lines
    mon.close()
    return time.perf_counter() - t0, len(update.flags)


def grep_run(path: Path) -> float:
    t0 = time.perf_counter()
    subprocess.run(["grep", "-cE", GREP, str(path)], capture_output=True, check=False)
    return time.perf_counter() - t0


def idle_poll(polls: int) -> None:
    """The per-tick cost of an idle kernel-fault source: the default source (/dev/kmsg here, else journalctl) plus
    three workers' logs that did not grow, against the pipeline's existing log monitor over the same three logs."""
    from amdtop.logread.kernel.monitor import KernelFaultMonitor
    from amdtop.logread.rccl.monitor import LogMonitor
    from amdtop.model import WorkerState, WorkerStatus
    from amdtop.telemetry.sim import SimBackend

    topology = SimBackend().topology()
    with tempfile.TemporaryDirectory() as d:
        workers = []
        for i in range(3):
            log = Path(d) / f"w{i}.log"
            log.write_text("INFO vLLM line\n" * 1000)
            workers.append(WorkerStatus(f"w{i}", WorkerState.READY, (i,), log=str(log)))
        mon = KernelFaultMonitor()
        logs = LogMonitor(lambda: [(w.name, Path(w.log or "")) for w in workers], topology)
        mon.poll(topology, workers)
        logs.poll()
        ours, theirs = [], []
        for _ in range(5):
            t0 = time.perf_counter()
            for _ in range(polls):
                mon.poll(topology, workers)
            ours.append((time.perf_counter() - t0) / polls)
            t0 = time.perf_counter()
            for _ in range(polls):
                logs.poll()
            theirs.append((time.perf_counter() - t0) / polls)
        src = mon.poll(topology, workers).status.source
        mon.close()
        logs.close()
    a, b = statistics.median(ours), statistics.median(theirs)
    print(
        f"idle poll, source {src} + 3 worker logs: {a * 1e6:.1f} us; LogMonitor.poll on the same logs: {b * 1e6:.1f} us"
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=int, default=20)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--idle-polls", type=int, default=0, help="measure the idle per-tick cost over this many polls")
    args = ap.parse_args()
    if args.idle_polls:
        idle_poll(args.idle_polls)
        return
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "kern.log"
        n = generate(path, args.mb)
        lines = path.read_text().splitlines()
        size = path.stat().st_size
        parse, mon, grep = [], [], []
        events = flags = 0
        for _ in range(args.runs):  # interleaved, so a noisy neighbour hits all three alike
            dt, events = parser_run(lines)
            parse.append(dt)
            dt, flags = monitor_run(path)
            mon.append(dt)
            grep.append(grep_run(path))
        med = {k: statistics.median(v) for k, v in (("parser", parse), ("monitor", mon), ("grep", grep))}
        print(f"log: {size / 1e6:.1f} MB, {n} lines, {events} fault events, {flags} flags after mapping")
        for k, v in med.items():
            print(
                f"{k:8s} median {v * 1000:8.1f} ms  {n / v / 1e3:9.0f} k lines/s  (runs: {', '.join(f'{x * 1000:.0f}' for x in sorted(parse if k == 'parser' else mon if k == 'monitor' else grep))} ms)"
            )
        print(
            f"parser/grep time ratio {med['parser'] / med['grep']:.1f}x, monitor/grep {med['monitor'] / med['grep']:.1f}x"
        )


if __name__ == "__main__":
    main()
