"""CPU of reading three servers amdtop did not start against three of its own: the cost the pipeline pays per look.

Both sides run the same server: the SGLang stand-in (``python -m sglang.launch_server`` from tests/fakes/sglang: real
processes titled as SGLang titles them, TP=2, real HTTP on loopback, ``/metrics`` the captured page of
tests/fixtures/sglang_metrics/sglang-docs-overloaded.txt). The own side launches three through the supervisor; the
found side starts three by hand (``subprocess.Popen``, stdout to a file). Each side is measured alone (the other's
servers stopped), as a node runs one or the other, and the sides alternate ``--rounds`` times.

One look is what a pipeline tick spends on its workers when their cadence comes round (every 2 s in the dashboard):
``NodePipeline._worker_list`` with the workers' cadence at 0, i.e. the supervisor's status pass (its process trees,
state files, ``/model_info`` and ``/metrics`` per worker) plus discovery's walk of the trees it watches on the own
side; discovery plus :class:`~amdtop.pipeline.found.FoundReader` (``/model_info``, ``/metrics``, each rank's stat, the
log's descriptors) on the found side. The median CPU (``time.process_time``: amdtop's own process, not the servers')
per look over ``--looks`` looks is reported, and the ratio found / own per round.

    .venv/bin/python bench/found_cost.py --rounds 3 --looks 200
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from amdtop.pipeline import NodePipeline
from amdtop.pipeline.found import FoundReader
from amdtop.supervisor import Supervisor
from amdtop.telemetry.sim import SimBackend
from tests.gates import PASS

REPO = Path(__file__).resolve().parents[1]
FAKES = REPO / "tests" / "fakes"
PAGE = REPO / "tests" / "fixtures" / "sglang_metrics" / "sglang-docs-overloaded.txt"
N = 3


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def server_argv(port: int) -> list[str]:
    return [sys.executable, "-m", "sglang.launch_server", "--model-path", "m", "--port", str(port), "--tp-size", "2",
            "--enable-metrics", "--metrics-page", str(PAGE)]  # fmt: skip


def server_env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": f"{FAKES}{os.pathsep}{REPO}"}


def wait_listening(ports: list[int], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    for port in ports:
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise SystemExit(f"port {port} never listened") from None
                time.sleep(0.1)


def looks(pipeline: NodePipeline, n: int) -> float:
    """Median CPU seconds of ``n`` looks at the workers (a short sleep between: a server answers, as in a tick)."""
    snap = pipeline.backend.sample()
    costs = []
    for _ in range(n):
        start = time.process_time()
        workers = pipeline._worker_list(snap, time.monotonic())
        costs.append(time.process_time() - start)
        time.sleep(0.01)
    assert len(workers) == N and all(w.engine is not None for w in workers), [w.name for w in workers]
    return statistics.median(costs)


def own_side(root: Path, n: int) -> float:
    config = root / "own.toml"
    tables = []
    command = json.dumps([sys.executable, "-m", "sglang.launch_server"])
    for i in range(N):
        tables.append(
            f'[[worker]]\nname = "own{i}"\nengine = "sglang"\nmodel = "m"\ngpus = [{2 * i}, {2 * i + 1}]\n'
            f'port = {free_port()}\nnuma_node = "none"\ncommand = {command}\n'
            f'[worker.args]\nenable-metrics = true\nmetrics-page = "{PAGE}"\n'
            f'[worker.env]\nPYTHONPATH = "{FAKES}{os.pathsep}{REPO}"\n'
        )
    config.write_text("\n".join(tables))
    sup = Supervisor(config, root / "state", gate=PASS, topology=SimBackend().topology(), grace_s=2.0)
    try:
        for i in range(N):
            sup.launch(f"own{i}")
        for i in range(N):
            sup.wait_ready(f"own{i}", timeout=30, poll=0.1)
        pipeline = NodePipeline(SimBackend(), sup, workers_every_s=0.0)
        looks(pipeline, 10)  # warm: the first walk, the meters' first pages
        return looks(pipeline, n)
    finally:
        for i in range(N):
            sup.stop(f"own{i}", grace=2.0)
        sup.close()


def found_side(root: Path, n: int) -> float:
    procs = []
    ports = [free_port() for _ in range(N)]
    for i, port in enumerate(ports):
        with open(root / f"found{i}.log", "wb") as out:
            procs.append(subprocess.Popen(server_argv(port), env=server_env(), stdout=out, stderr=subprocess.STDOUT,
                                          start_new_session=True))  # fmt: skip
    try:
        wait_listening(ports)
        pipeline = NodePipeline(SimBackend(), None, workers_every_s=0.0, found=FoundReader(every_s=0.0))
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # every scheduler up (discovery sees each server's two ranks)
            ws = pipeline._worker_list(pipeline.backend.sample(), time.monotonic())
            if len(ws) == N and all(len(w.rank_pids) == 2 and w.engine is not None for w in ws):
                break
            time.sleep(0.2)
        looks(pipeline, 10)
        return looks(pipeline, n)
    finally:
        for p in procs:
            os.killpg(p.pid, signal.SIGTERM)
            p.wait(10)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--looks", type=int, default=200)
    ap.add_argument("--json", default=None, help="write the rounds here")
    args = ap.parse_args()
    rounds = []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            own_root, found_root = Path(tmp) / f"own{r}", Path(tmp) / f"found{r}"
            own_root.mkdir()
            found_root.mkdir()
            own = own_side(own_root, args.looks)
            found = found_side(found_root, args.looks)
            rounds.append({"round": r + 1, "own_ms": own * 1e3, "found_ms": found * 1e3, "ratio": found / own})
            print(f"round {r + 1}: own {own * 1e3:.2f} ms/look, found {found * 1e3:.2f} ms/look, "
                  f"found/own {found / own:.2f}", flush=True)  # fmt: skip
    ratios = [x["ratio"] for x in rounds]
    print(f"found/own median {statistics.median(ratios):.2f} (rounds {', '.join(f'{x:.2f}' for x in ratios)})")
    if args.json:
        Path(args.json).write_text(json.dumps(rounds, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
