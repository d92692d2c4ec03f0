"""CPU time of one full telemetry poll (all metrics, all GPUs) per backend.

    .venv/bin/python bench/poll.py [--polls 2000] [--runs 7] [--json]

Backends: ``sim`` (8x MI300X), ``sysfs`` on the 8x MI300X fixture tree built in tmpfs (/dev/shm), and ``nvml``
where pynvml can talk to a driver. Peer in the same run: ``raw-files`` reads exactly the metric files the sysfs
backend reads (one os.open/os.read/os.close each, no parsing, no snapshot) -- the floor under the sysfs backend.
``sysfs+health`` is the same tree with a gpu_metrics v1.6 table and eight RAS ``*_err_count`` files per GPU (what an
MI300X under a 6.8+ kernel has), so the XGMI counters, throttle residencies and ECC counts are read and parsed each
poll; ``+derive`` adds the rates and shares the producer computes from the history (fabric traffic over the last
interval, throttle share over 10 s). Compare ``sysfs+health`` with ``sysfs`` from the same run.
Each run times ``polls`` consecutive polls with ``time.process_time``; the table gives the median (and min) over runs.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from amdtop.errors import AmdtopError
from amdtop.health.throttle import throttle_shares
from amdtop.health.traffic import latest_traffic
from amdtop.telemetry import open_backend
from amdtop.telemetry.base import BackendOptions
from amdtop.telemetry.gpu_metrics import pack_gpu_metrics
from amdtop.telemetry.sim import SimBackend
from amdtop.telemetry.sysfs import SysfsBackend
from tests.fixtures.sysfs_tree import build_mi300x_8


def measure(poll: Callable[[], object], polls: int, runs: int) -> tuple[float, float, float]:
    """(median CPU ms/poll, min CPU ms/poll, median wall ms/poll) over ``runs`` runs of ``polls`` polls."""
    for _ in range(min(50, polls)):
        poll()  # warm caches and the allocator
    cpu, wall = [], []
    for _ in range(runs):
        c0, w0 = time.process_time(), time.perf_counter()
        for _ in range(polls):
            poll()
        cpu.append((time.process_time() - c0) / polls * 1e3)
        wall.append((time.perf_counter() - w0) / polls * 1e3)
    return statistics.median(cpu), min(cpu), statistics.median(wall)


def _raw_reader(backend: SysfsBackend) -> Callable[[], None]:
    paths = [m.path for g in backend._gpus for m in g.metrics]

    def read_all() -> None:
        for p in paths:
            fd = os.open(p, os.O_RDONLY)
            os.read(fd, 64)
            os.close(fd)

    return read_all


RAS_BLOCKS = ("umc", "sdma", "gfx", "mmhub", "pcie_bif", "hdp", "xgmi_wafl", "mp1")


def add_health_files(tree: object, gpus: int) -> None:
    """gpu_metrics v1.6 and RAS files for every GPU of a fixture tree."""
    for i in range(gpus):
        dev = tree.device_dir(i)  # type: ignore[attr-defined]
        values: dict[str, int | list[int]] = {
            "accumulation_counter": 123_456,
            "ppt_residency_acc": 4_000,
            "prochot_residency_acc": 0,
            "socket_thm_residency_acc": 0,
            "vr_thm_residency_acc": 0,
            "hbm_thm_residency_acc": 0,
            "curr_socket_power": 612,
            "xgmi_read_data_acc": [10**9 + k for k in range(8)],
            "xgmi_write_data_acc": [2 * 10**9 + k for k in range(8)],
        }
        (dev / "gpu_metrics").write_bytes(pack_gpu_metrics((1, 6), values))
        (dev / "ras").mkdir(exist_ok=True)
        for block in RAS_BLOCKS:
            (dev / "ras" / f"{block}_err_count").write_text("ue: 0\nce: 0\n")


def _deriving(poll: Callable[[], object]) -> Callable[[], object]:
    history: list[object] = []

    def run() -> object:
        history.append(poll())
        del history[:-11]
        latest_traffic(history)  # type: ignore[arg-type]
        return throttle_shares(history, 10.0)  # type: ignore[arg-type]

    return run


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--polls", type=int, default=2000)
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--json", action="store_true", help="print JSON rows instead of a table")
    args = ap.parse_args()
    base = "/dev/shm" if os.path.isdir("/dev/shm") else None
    rows: list[dict[str, object]] = []
    with tempfile.TemporaryDirectory(prefix="amdtop-bench-", dir=base) as tmp:
        tree = build_mi300x_8(Path(tmp) / "plain")
        sysfs = SysfsBackend(tree.root, tree.proc_root)
        htree = build_mi300x_8(Path(tmp) / "health")
        add_health_files(htree, 8)
        hsysfs = SysfsBackend(htree.root, htree.proc_root)
        sim = SimBackend(seed=0)
        cases: list[tuple[str, int, Callable[[], object]]] = [
            ("sim", 8, sim.sample),
            ("sysfs", 8, sysfs.sample),
            ("sysfs+health", 8, hsysfs.sample),
            ("+derive", 8, _deriving(hsysfs.sample)),
            ("raw-files", 8, _raw_reader(sysfs)),
        ]
        try:
            nvml = open_backend("nvml", BackendOptions())
            cases.append(("nvml", len(nvml.topology().gpus), nvml.sample))
        except (AmdtopError, ImportError) as exc:
            print(f"nvml: skipped ({exc})", file=sys.stderr)
        for name, gpus, poll in cases:
            med, best, wall = measure(poll, args.polls, args.runs)
            rows.append(
                {"backend": name, "gpus": gpus, "cpu_ms_median": med, "cpu_ms_min": best, "wall_ms_median": wall}
            )
    ref = {r["backend"]: r["cpu_ms_median"] for r in rows}
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(f"{'backend':<14}{'GPUs':>5}{'CPU ms/poll (median)':>22}{'min':>8}{'wall ms':>9}{'x raw-files':>13}")
    for r in rows:
        ratio = float(r["cpu_ms_median"]) / float(ref["raw-files"])  # type: ignore[arg-type]
        print(
            f"{r['backend']:<14}{r['gpus']:>5}{r['cpu_ms_median']:>22.3f}{r['cpu_ms_min']:>8.3f}"
            f"{r['wall_ms_median']:>9.3f}{ratio:>13.2f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
