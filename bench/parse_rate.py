"""Parse rate of the RCCL/NCCL log parser on a generated 1M-line log, against a baseline revision in the same run,
next to ``grep -c 'NCCL INFO'``; and the cost of joining communicators on a 64-process log.

Usage: .venv/bin/python bench/parse_rate.py [--lines 1000000] [--runs 5] [--baseline 7a20c1f] [--procs 64]
The 1M-line log mixes 8-rank RCCL inits (16 channels, one distinct commId per init, an error block every 50 inits)
with vLLM INFO lines, so both the regex path and the cheap-prefix path are exercised. The baseline's ``amdtop/`` is
taken from git (``git archive``) and both parsers run in alternating subprocesses: on a shared CPU only the ratio of
the two is meaningful. The 64-process log is 8 hosts x 8 GPUs, one process per rank, per-process pointers and no
commId (RCCL 2.16-2.21), interleaved into one file, with 4 communicators per process.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def generate(path: Path, n: int) -> None:
    from tests.fixtures.rccl.make_logs import rccl_rank_lines

    lines: list[str] = []
    k = 0
    while len(lines) < n:
        for r in range(8):
            lines += rccl_rank_lines(r, 8, nchannels=16, comm_id=f"0x{k:016x}", errors=(k % 50 == 0 and r == 3))
        lines += [
            f"INFO 07-20 17:27:{k % 60:02d} metrics.py:351] Avg prompt throughput: 0.0 tokens/s" for _ in range(100)
        ]
        k += 1
    path.write_text("\n".join(lines[:n]) + "\n")


def generate_job(path: Path, procs: int, comms: int = 4) -> None:
    """``procs`` processes (8 per host), ``comms`` communicators of all of them, no commId, interleaved."""
    from tests.fixtures.rccl.make_logs import interleave, proc_comm_lines

    hosts = tuple(f"n{r // 8}" for r in range(procs))
    bus = tuple(f"{0x5000 + (r % 8) * 0x21000:x}" for r in range(procs))
    out: list[str] = []
    for c in range(comms):
        per = [
            proc_comm_lines(
                r, bus, host=hosts[r], pid=7000 + r, dev=r % 8, ptr=f"0x{c + 1:x}{r:04x}", peer_host=hosts, nchannels=8
            )
            for r in range(procs)
        ]
        out += interleave(per)
    path.write_text("\n".join(out) + "\n")


def measure(log: Path, runs: int) -> dict[str, float]:
    """Median wall and CPU seconds of ``parse_files`` (with whatever ``amdtop`` is importable), and the join's share."""
    from amdtop.logread.rccl import parser as mod

    parse_files = mod.parse_files
    wall, cpu, report_s = [], [], []
    lines = comms = 0
    for _ in range(runs):
        t, c = time.perf_counter(), time.process_time()
        rep = parse_files([log])
        wall.append(time.perf_counter() - t)
        cpu.append(time.process_time() - c)
        lines, comms = rep.lines, len(rep.comms)
        # the report (join of per-process views, trace verdicts, warning groups) on its own
        p = mod.LogParser()
        p.feed_lines(log.read_text().split("\n"), str(log))
        t = time.perf_counter()
        p.report()
        report_s.append(time.perf_counter() - t)
    return {
        "lines": lines,
        "comms": comms,
        "wall_s": statistics.median(wall),
        "cpu_s": statistics.median(cpu),
        "report_s": statistics.median(report_s),
    }


def _extract(rev: str, into: Path) -> Path:
    archive = into / "base.tar"
    subprocess.run(["git", "-C", str(ROOT), "archive", "-o", str(archive), rev, "amdtop"], check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(into / "base", filter="data")
    return into / "base"


def _child(log: Path, runs: int, path: Path | None) -> dict[str, float]:
    env = dict(os.environ)
    if path is not None:
        env["PYTHONPATH"] = str(path)  # the baseline's amdtop/ shadows the working tree's
    cmd = [sys.executable, __file__, "--measure", str(log), "--runs", str(runs)]
    if path is not None:
        cmd += ["--root", str(path)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env, cwd=str(path or ROOT)).stdout
    return json.loads(out)  # type: ignore[no-any-return]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lines", type=int, default=1_000_000)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--baseline", default="7a20c1f", help="git revision to compare with (the parser before issue 14)")
    ap.add_argument("--procs", type=int, default=64)
    ap.add_argument("--measure", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--root", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.measure:
        if args.root:
            sys.path.insert(0, str(args.root))
        print(json.dumps(measure(args.measure, args.runs)))
        return 0
    grep = shutil.which("grep")
    with tempfile.TemporaryDirectory() as tmp:
        log, job = Path(tmp) / "big.log", Path(tmp) / "job64.log"
        generate(log, args.lines)
        generate_job(job, args.procs)
        base = _extract(args.baseline, Path(tmp))
        new_s, old_s, grep_s = [], [], []
        new = old = {}
        for _ in range(args.runs):  # alternate so both see the same load
            new = _child(log, 1, None)
            old = _child(log, 1, base)
            new_s.append(new["wall_s"])
            old_s.append(old["wall_s"])
            if grep:
                t = time.perf_counter()
                subprocess.run([grep, "-c", "NCCL INFO", str(log)], check=True, capture_output=True)
                grep_s.append(time.perf_counter() - t)
        job_runs = max(20, args.runs)  # a 4k-line log: many runs for a stable median on a shared CPU
        job_new, job_old = _child(job, job_runs, None), _child(job, job_runs, base)
        size, job_lines = log.stat().st_size, job.read_text().count("\n")
    med_new, med_old = statistics.median(new_s), statistics.median(old_s)
    result = {
        "lines": new["lines"],
        "bytes": size,
        "runs": args.runs,
        "load_avg_1m": round(os.getloadavg()[0], 1),
        "parse_median_s": round(med_new, 3),
        "parse_lines_per_s": round(new["lines"] / med_new),
        "baseline": args.baseline,
        "baseline_median_s": round(med_old, 3),
        "baseline_lines_per_s": round(old["lines"] / med_old),
        "new_over_baseline_time": round(med_new / med_old, 3),
        "grep_median_s": round(statistics.median(grep_s), 4) if grep_s else None,
        "job_procs": args.procs,
        "job_lines": job_lines,
        "job_comms_new": job_new["comms"],
        "job_comms_baseline": job_old["comms"],
        "job_parse_s": round(job_new["wall_s"], 4),
        "job_report_s": round(job_new["report_s"], 4),
        "job_report_share": round(job_new["report_s"] / job_new["wall_s"], 3),
        "job_baseline_parse_s": round(job_old["wall_s"], 4),
    }
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
