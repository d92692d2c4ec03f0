"""The simulated TP worker's RCCL output, read by a real :class:`LogMonitor` into its typed update."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

from amdtop.logread.rccl.monitor import LogMonitor, LogUpdate
from amdtop.logread.rccl.parser import parse_lines
from amdtop.model import FlagKind
from amdtop.simserver.__main__ import visible_bdfs
from amdtop.simserver.logs import rccl_init_lines
from amdtop.telemetry.sim import MI300X_BDFS, SimBackend


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _run_worker(log: Path, gpus: str, *, p2p_disable: bool) -> subprocess.Popen[bytes]:
    env = {**os.environ, "NCCL_DEBUG": "INFO", "HIP_VISIBLE_DEVICES": gpus}
    env.pop("CUDA_VISIBLE_DEVICES", None)
    if p2p_disable:
        env["NCCL_P2P_DISABLE"] = "1"
    tp = str(len(gpus.split(",")))
    argv = [sys.executable, "-m", "amdtop.simserver", "--port", str(_free_port()), "--tp", tp, "--log-file", str(log)]
    return subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _poll_until(monitor: LogMonitor, worker: str, done: int) -> LogUpdate:
    deadline = time.monotonic() + 20
    while True:
        update = monitor.poll()
        view = update.worker(worker)
        if view is not None and view.comms and view.comms[0].init_complete >= done:
            return update
        assert time.monotonic() < deadline, "the simulated worker wrote no complete RCCL init"
        time.sleep(0.1)


def test_visible_devices_pick_the_simulated_bus_ids() -> None:
    assert visible_bdfs({"HIP_VISIBLE_DEVICES": "4,5"}) == (MI300X_BDFS[4], MI300X_BDFS[5])
    assert visible_bdfs({"CUDA_VISIBLE_DEVICES": "0, 9"}) == (MI300X_BDFS[0],)
    assert visible_bdfs({}) == ()


def test_sim_rccl_output_is_one_communicator_with_one_process_per_rank() -> None:
    lines = rccl_init_lines(4, 900, bdfs=MI300X_BDFS[:4], host="n1")
    rep = parse_lines(lines)
    assert rep.unknown_lines == 0 and (rep.library, rep.version) == ("RCCL", "2.20.5")
    (comm,) = rep.comms
    assert comm.joined_by == "structure" and comm.processes == 4 and len({r.ptr for r in comm.ranks}) == 4
    assert [(r.rank, r.pid, r.bus_id, r.init_complete) for r in comm.ranks] == [
        (0, 901, "5000", True),
        (1, 902, "26000", True),
        (2, 903, "46000", True),
        (3, 904, "65000", True),
    ]
    assert comm.summary == "4 ranks, all pairs P2P/IPC" and comm.rings_connected == 4
    assert [(g.count, g.processes) for g in rep.warning_groups] == [(4, 4)]


def test_monitor_reads_a_real_sim_worker_p2p_and_fallback(tmp_path: Path) -> None:
    good, bad = tmp_path / "llama.log", tmp_path / "qwen.log"
    procs = [_run_worker(good, "0,1,2,3", p2p_disable=False), _run_worker(bad, "4,5", p2p_disable=True)]
    try:
        monitor = LogMonitor([("llama", good), ("qwen", bad)], SimBackend().topology())
        _poll_until(monitor, "llama", 4)
        update = _poll_until(monitor, "qwen", 2)
        # The workers go on writing (warnings may follow the init lines): read until both logs are quiet.
        deadline = time.monotonic() + 10
        while update.counts() != (("llama", 0, 4), ("qwen", 0, 2)) and time.monotonic() < deadline:
            time.sleep(0.2)
            update = monitor.poll()
    finally:
        for p in procs:
            p.terminate()
            p.wait(10)
    llama, qwen = update.worker("llama"), update.worker("qwen")
    assert llama is not None and qwen is not None
    (c,) = llama.comms
    assert c.gpus == (0, 1, 2, 3) and c.summary == "4 ranks, all pairs P2P/IPC over XGMI (GPUs 0,1,2,3)"
    assert {(p.transport, p.link, p.fallback) for p in c.pairs} == {("P2P/IPC", "XGMI", False)}
    (q,) = qwen.comms
    assert q.gpus == (4, 5)
    assert [(p.src, p.dst, p.transport, p.src_gpu, p.dst_gpu, p.fallback) for p in q.pairs] == [
        (0, 1, "SHM/direct", 4, 5, True),
        (1, 0, "SHM/direct", 5, 4, True),
    ]
    (flag,) = update.flags
    assert (flag.kind, flag.worker, flag.gpus) == (FlagKind.TRANSPORT_FALLBACK, "qwen", (4, 5))
    assert "SHM/direct" in flag.message and "XGMI" in flag.message
    assert update.counts() == (("llama", 0, 4), ("qwen", 0, 2))
    assert qwen.warning_groups[0].count == 2 and qwen.warning_groups[0].processes == 2


def test_a_new_launch_replaces_the_last_runs_communicators(tmp_path: Path) -> None:
    # the supervisor appends "=== amdtop launch ..." to the worker's log before each launch
    log = tmp_path / "qwen.log"
    first = rccl_init_lines(2, 4200, bdfs=MI300X_BDFS[4:6], p2p=False, host="n1")
    second = rccl_init_lines(2, 4300, bdfs=MI300X_BDFS[4:6], host="n1")
    log.write_text("=== amdtop launch qwen:1 at 2026-12-01 10:00:00: vllm serve\n" + "\n".join(first) + "\n")
    monitor = LogMonitor([("qwen", log)], SimBackend().topology(), backlog_bytes=0)
    assert [f.kind for f in monitor.poll().flags] == [FlagKind.TRANSPORT_FALLBACK]  # primed from the head
    with log.open("a") as fh:
        fh.write("=== amdtop launch qwen:2 at 2026-12-01 10:05:00: vllm serve\n" + "\n".join(second) + "\n")
    update = monitor.poll()
    view = update.worker("qwen")
    assert view is not None and update.flags == ()
    (comm,) = view.comms
    assert [r.pid for r in comm.ranks] == [4301, 4302] and {p.transport for p in comm.pairs} == {"P2P/IPC"}
    assert view.unknown_lines == 0
    # a monitor started later primes only the newest launch from the head
    late = LogMonitor([("qwen", log)], SimBackend().topology(), backlog_bytes=0).poll().worker("qwen")
    assert late is not None and [r.pid for r in late.comms[0].ranks] == [4301, 4302]


def test_worker_logs_json_is_plain_data() -> None:
    import json

    from amdtop.logread.rccl.diagnose import diagnose
    from amdtop.logread.rccl.views import worker_logs, worker_logs_json

    topo = SimBackend().topology()
    rep = parse_lines(rccl_init_lines(2, 4200, bdfs=MI300X_BDFS[4:6], p2p=False, host="n1"))
    doc = worker_logs_json(worker_logs("qwen", rep, topo, tuple(diagnose(rep, topo, "qwen"))))
    assert json.loads(json.dumps(doc)) == doc
    (comm,) = doc["comms"]
    assert [(r["rank"], r["gpu"], r["pid"]) for r in comm["ranks"]] == [(0, 4, 4201), (1, 5, 4202)]
    assert comm["edges"][0] == {
        "from": 0,
        "to": 1,
        "transport": "SHM/direct",
        "channels": 2,
        "gpus": [4, 5],
        "link": "XGMI",
        "inter_node": False,
        "fallback": True,
    }
    assert (doc["errors"], doc["warnings"], doc["warning_groups"][0]["count"]) == (0, 2, 2)
