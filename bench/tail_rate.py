"""Live-tail rate of :class:`LogMonitor` on a growing 20 MB RCCL log carrying issue 27's failure patterns, against a
baseline revision in the same run.

Usage: .venv/bin/python bench/tail_rate.py [--mb 20] [--runs 3] [--baseline 0c4b26b] [--chunk-mb 1]
The log mixes 8-rank RCCL inits (16 channels each, one commId per init, an error block every 50 inits) with the lines
issue 27 added to the grammar: ``NET/IB : Using`` and ``NET/Socket : Using`` NIC lists, ``via NET/AWS
Libfabric/1/GDRDMA/Shared`` channels and old-NCCL Trees lines with every init, and every 50th init a trail-less
``hipIpcGetMemHandle failed`` WARN, a ``node [1] [FATAL ERROR]`` line and ``Abort COMPLETE``; plus vLLM INFO lines. The monitor follows the file the way the
dashboard does (``poll()``); the bench appends ``--chunk-mb`` of whole lines between polls until the whole log is
written, timing only the polls, with ``max_lines`` high enough that no line is dropped (every line is parsed: the
parser's line count is checked). The baseline's ``amdtop/`` comes from git (``git archive``); both run in alternating
subprocesses, so on a shared CPU only their ratio is meaningful.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _new_lines(k: int) -> list[str]:
    """The new patterns: startup NIC lines, a plugin channel and an old-NCCL Trees line with every init; the failure
    lines (a trail-less IPC WARN, ``[FATAL ERROR]``, ``Abort COMPLETE``) with every 50th, like the error blocks."""
    h = f"node{k % 2}:{9000 + k % 8}:{9100 + k % 8}"
    lines = [
        f"{h} [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB [2]mlx5_2:1/IB [3]mlx5_3:1/IB [RO]; OOB bond0:10.0.0.{k % 250}<0>",
        f"{h} [0] NCCL INFO NET/Socket : Using [0]eth0:10.1.0.{k % 250}<0> [1]eth1:10.2.0.{k % 250}<0>",
        f"{h} [0] NCCL INFO Using network IB",
        f"{h} [2] NCCL INFO Channel 04/1 : 15[7] -> 2[2] [receive] via NET/AWS Libfabric/1/GDRDMA/Shared",
        f"{h} [2] NCCL INFO Trees [0] 6/-1/-1->5->4 [1] 6/-1/-1->5->4 [2] -1/-1/-1->5->4",
    ]
    if k % 50 == 25:
        lines += [
            f"{h} [1] /app/rccl/build/release/hipify/src/transport/p2p.cc:256 NCCL WARN hipIpcGetMemHandle failed : invalid argument",
            f"node [{k % 8}] [FATAL ERROR]: HIP failure: 'invalid argument'",
            f"{h} [3] NCCL INFO comm 0x7f{k:x} rank 3 nranks 8 cudaDev 3 busId 65000 - Abort COMPLETE",
        ]
    return lines


def generate(path: Path, mb: int) -> int:
    sys.path.insert(0, str(ROOT))
    from tests.fixtures.rccl.make_logs import rccl_rank_lines

    lines: list[str] = []
    size = k = 0
    while size < mb << 20:
        block: list[str] = []
        for r in range(8):
            block += rccl_rank_lines(r, 8, nchannels=16, comm_id=f"0x{k:016x}", errors=(k % 50 == 0 and r == 3))
        block += _new_lines(k)
        block += [f"INFO 07-20 17:27:{k % 60:02d} metrics.py:351] Avg prompt throughput: 0.0 tokens/s"] * 100
        size += sum(len(x) + 1 for x in block)
        lines += block
        k += 1
    path.write_text("\n".join(lines) + "\n")
    return len(lines)


def measure(log: Path, chunk: int) -> dict[str, float]:
    """Append ``log`` to a fresh file ``chunk`` bytes (whole lines) at a time, polling a LogMonitor after each."""
    from amdtop.logread.rccl.monitor import LogMonitor

    data = log.read_bytes()
    with tempfile.TemporaryDirectory() as tmp:
        live = Path(tmp) / "w.log"
        live.write_bytes(b"")
        mon = LogMonitor([("w", live)], max_lines=1 << 30)
        mon.poll()
        wall = cpu = 0.0
        pos = polls = 0
        with live.open("ab") as fh:
            while pos < len(data):
                end = data.rfind(b"\n", pos, pos + chunk) + 1 or len(data)
                fh.write(data[pos:end])
                fh.flush()
                pos = end
                t, c = time.perf_counter(), time.process_time()
                mon.poll()
                wall += time.perf_counter() - t
                cpu += time.process_time() - c
                polls += 1
        report = mon.report("w")
        lines = report.lines if report else 0
        mon.close()
    # the peer in the same process: ``logs parse``'s whole-file path on the same bytes (its own 300k lines/s target)
    from amdtop.logread.rccl.parser import parse_files

    t, c = time.perf_counter(), time.process_time()
    parse_files([log])
    peer_wall, peer_cpu = time.perf_counter() - t, time.process_time() - c
    return {
        "lines": lines,
        "wall_s": wall,
        "cpu_s": cpu,
        "polls": polls,
        "peer_wall_s": peer_wall,
        "peer_cpu_s": peer_cpu,
    }


def _extract(rev: str, into: Path) -> Path:
    archive = into / "base.tar"
    subprocess.run(["git", "-C", str(ROOT), "archive", "-o", str(archive), rev, "amdtop"], check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(into / "base", filter="data")
    return into / "base"


def _child(log: Path, chunk: int, path: Path | None) -> dict[str, float]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(path or ROOT)
    cmd = [sys.executable, __file__, "--measure", str(log), "--chunk", str(chunk)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env, cwd=str(path or ROOT)).stdout
    return json.loads(out)  # type: ignore[no-any-return]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=int, default=20)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--chunk-mb", type=float, default=1.0)
    ap.add_argument("--baseline", default="0c4b26b", help="git revision to compare with (main before issue 27)")
    ap.add_argument("--baseline-dir", type=Path, help="a folder holding the baseline's amdtop/ (where git is absent)")
    ap.add_argument("--measure", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--chunk", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.measure:
        print(json.dumps(measure(args.measure, args.chunk)))
        return 0
    chunk = int(args.chunk_mb * (1 << 20))
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "big.log"
        total = generate(log, args.mb)
        base = args.baseline_dir.resolve() if args.baseline_dir else _extract(args.baseline, Path(tmp))
        new_s, old_s, new_cpu, old_cpu, peer_s, peer_cpu = [], [], [], [], [], []
        new = old = {}
        for _ in range(args.runs):  # alternate so both see the same load
            new, old = _child(log, chunk, None), _child(log, chunk, base)
            new_s.append(new["wall_s"])
            old_s.append(old["wall_s"])
            new_cpu.append(new["cpu_s"])
            old_cpu.append(old["cpu_s"])
            peer_s.append(new["peer_wall_s"])
            peer_cpu.append(new["peer_cpu_s"])
        size = log.stat().st_size
    med_new, med_old = statistics.median(new_s), statistics.median(old_s)
    result = {
        "bytes": size,
        "lines_written": total,
        "lines_parsed_new": new["lines"],
        "lines_parsed_baseline": old["lines"],
        "polls": new["polls"],
        "runs": args.runs,
        "load_avg_1m": round(os.getloadavg()[0], 1),
        "new_median_s": round(med_new, 3),
        "new_lines_per_s": round(total / med_new),
        "new_cpu_lines_per_s": round(total / statistics.median(new_cpu)),
        "baseline": args.baseline,
        "baseline_median_s": round(med_old, 3),
        "baseline_lines_per_s": round(total / med_old),
        "baseline_cpu_lines_per_s": round(total / statistics.median(old_cpu)),
        "new_over_baseline_time": round(med_new / med_old, 3),
        "new_over_baseline_cpu": round(statistics.median(new_cpu) / statistics.median(old_cpu), 3),
        "peer_parse_files_lines_per_s": round(total / statistics.median(peer_s)),
        "peer_parse_files_cpu_lines_per_s": round(total / statistics.median(peer_cpu)),
        "tail_over_parse_files_cpu": round(statistics.median(new_cpu) / statistics.median(peer_cpu), 3),
    }
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
