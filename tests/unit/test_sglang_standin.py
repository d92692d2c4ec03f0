"""An SGLang profile launched, read, judged and stopped by the supervisor, against a stand-in serving a real page.

Real SGLang does not run on this machine's CPU (sglang 0.5.23 from PyPI: "No module named 'vllm'" from its rotary
embedding, and with SGLANG_USE_CPU_ENGINE=1 "[sgl_kernel] CRITICAL: Could not load any common_ops library!"), so the
worker is the simulated server in its SGLang flavour: real processes titled as SGLang titles them
(``sglang::scheduler_TP<t>``, ``sglang::detokenizer``), real HTTP on loopback, and ``/metrics`` the captured page of
an overloaded SGLang server (tests/fixtures/sglang_metrics/sglang-docs-overloaded.txt, source in its first line).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

import pytest

from amdtop.model import WorkerState
from amdtop.procinfo import read_cmdline
from amdtop.supervisor import Supervisor
from amdtop.supervisor.procs import mapped_shm as procs_shm
from amdtop.supervisor.procs import scan, shm_for_pids, title
from amdtop.telemetry.sim import SimBackend
from tests.gates import PASS

TOPO = SimBackend().topology()
PAGE = Path(__file__).resolve().parents[1] / "fixtures" / "sglang_metrics" / "sglang-docs-overloaded.txt"


def profile(tmp_path: Path, port: int) -> Path:
    cfg = tmp_path / "c.toml"
    command = json.dumps([sys.executable, "-m", "amdtop.simserver", "--flavour", "sglang", "--metrics-page", str(PAGE)])
    # GPUs 6 and 7: the launched schedulers carry HIP_VISIBLE_DEVICES, so the launch gate of every other test that
    # runs meanwhile (on another xdist worker, reading the whole host) reads them as a server started outside amdtop
    # on those GPUs; on 0 and 1, where most launching tests put their workers, it refused test_hostile4's launch once.
    cfg.write_text(
        f'[[worker]]\nname = "sg"\nengine = "sglang"\nmodel = "meta-llama/Llama-3.1-8B-Instruct"\ngpus = [6, 7]\n'
        f'port = {port}\nnuma_node = "none"\ncommand = {command}\n'
        "[worker.args]\nmem-fraction-static = 0.85\nmax-running-requests = 256\n"
    )
    return cfg


def sglang_titled() -> set[int]:
    return {p for p in scan() if title(p).startswith("sglang::")}


@pytest.fixture
def port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_sglang_worker_launches_reads_judges_and_stops_clean(
    tmp_path: Path, port: int, capsys: pytest.CaptureFixture[str]
) -> None:
    from amdtop.cli.main import main

    before = sglang_titled()
    cfg = profile(tmp_path, port)
    sup = Supervisor(cfg, tmp_path / "state", gate=PASS, topology=TOPO, grace_s=2.0)
    try:
        sup.launch("sg")
        st = sup.wait_ready("sg", timeout=30, poll=0.1)
        assert st.state is WorkerState.READY and st.engine_kind == "sglang"
        argv = read_cmdline(st.pid or 0)
        assert argv[argv.index("--model-path") + 1] == "meta-llama/Llama-3.1-8B-Instruct"
        assert "--enable-metrics" in argv and argv[argv.index("--tp-size") + 1] == "2"
        # the two schedulers are the worker's ranks, in TP order, and the detokenizer is one of its processes
        deadline = time.monotonic() + 10
        while (len(st.rank_pids) < 2 or not any(title(p) == "sglang::detokenizer" for p in st.pids)) and (
            time.monotonic() < deadline
        ):
            time.sleep(0.1)
            st = sup.status_one("sg")
        assert [r for r, _ in st.rank_pids] == [0, 1]
        assert [title(p) for _, p in st.rank_pids] == ["sglang::scheduler_TP0", "sglang::scheduler_TP1"]
        assert any(title(p) == "sglang::detokenizer" for p in st.pids)

        common = ["--backend", "sim", "--config", str(cfg), "--state-dir", str(tmp_path / "state")]
        assert main([*common, "workers", "status", "--json"]) == 0
        [doc] = json.loads(capsys.readouterr().out)
        assert doc["engine_kind"] == "sglang" and doc["state"] == "ready"
        engine = doc["engine"]
        assert engine["running"] == 162.0 and engine["waiting"] == 2826.0 and engine["kv_cache_usage"] == 0.28
        assert engine["gen_tokens_per_s"] == pytest.approx(86.50814177726902)
        assert engine["cache_hit_rate"] == pytest.approx(0.007507552643049313)
        assert engine["ttft_mean_s"] == pytest.approx(2.3518979474117756e06 / 11008.0)
        assert engine["itl_mean_s"] == pytest.approx(866964.5791549598 / 7.400757e06)
        assert [e["engine"] for e in doc["engines"]] == ["0"]
        assert main([*common, "workers", "status"]) == 0
        table = capsys.readouterr().out.splitlines()
        assert table[1].split()[:2] == ["sg", "ready"] and "    engine: sglang" in table

        # a scheduler rank stopped (SIGSTOP) is the worker's stall verdict, named by its rank and pid
        rank1 = st.rank_pids[1][1]
        os.kill(rank1, signal.SIGSTOP)
        try:
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                health = sup.status_one("sg").health
                if health is not None and health.verdict == "rank_stopped":
                    break
                time.sleep(0.1)
            assert health is not None and health.verdict == "rank_stopped" and health.rank == 1 and health.pid == rank1
        finally:
            os.kill(rank1, signal.SIGCONT)
        # ... and one killed is rank_dead, named after its process is gone (once it holds its segment: a crash then
        # leaves that behind, for the stop to sweep)
        deadline = time.monotonic() + 20
        while not shm_for_pids({rank1}) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert shm_for_pids({rank1})
        os.kill(rank1, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            health = sup.status_one("sg").health
            if health is not None and health.verdict == "rank_dead":
                break
            time.sleep(0.1)
        assert health is not None and health.verdict == "rank_dead" and health.rank == 1, health

        pids = set(sup.status_one("sg").pids)
        report = sup.stop("sg")
        assert sup.status_one("sg").state is WorkerState.STOPPED
        assert not pids & set(scan()), report.message  # no orphans: the schedulers and detokenizer are gone
        # the SIGKILLed rank left its segment behind; the stop removed it by the pid in its name
        assert not shm_for_pids(pids | {rank1}) and any(f"sgl_shm_sim_{rank1}_" in p for p in report.swept_shm)
        assert sglang_titled() <= before
    finally:
        for name in sup.names():
            sup.stop(name, grace=0.2)
        sup.close()


def test_hand_started_server_is_discovered_from_its_real_processes(port: int) -> None:
    # SGLang's own command line (sgl-project/sglang#9799's, with this test's port), run by the stand-in package in
    # tests/fakes/sglang: real processes, the API server's argv as ps shows it, schedulers titled as SGLang titles them.
    import subprocess

    from amdtop.analysis import discover_vllm

    fakes = Path(__file__).resolve().parents[1] / "fakes"
    env = {**os.environ, "PYTHONPATH": f"{fakes}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
           "HIP_VISIBLE_DEVICES": "4,5"}  # fmt: skip
    argv = [sys.executable, "-m", "sglang.launch_server", "--model-path", "./q14", "--port", str(port), "--host",
            "0.0.0.0", "--tool-call-parser", "qwen25", "--tp", "2"]  # fmt: skip
    server = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        found: list = []  # type: ignore[type-arg]
        while time.monotonic() < deadline:
            found = [w for w in discover_vllm() if w.pid == server.pid]
            if found and len(found[0].rank_pids) == 2 and any(title(p) == "sglang::detokenizer" for p in found[0].pids):
                break  # every process up (the detokenizer starts last: a loaded box shows the schedulers first)
            time.sleep(0.1)
        [w] = found
        assert w.name == f"sglang-{server.pid}" and w.engine_kind == "sglang" and w.source == "discovered"
        assert w.port == port and w.url == f"http://127.0.0.1:{port}"
        assert w.gpus == (4, 5) and [r for r, _ in w.rank_pids] == [0, 1]
        assert [title(p) for _, p in w.rank_pids] == ["sglang::scheduler_TP0", "sglang::scheduler_TP1"]
        assert any(title(p) == "sglang::detokenizer" for p in w.pids)
    finally:
        server.terminate()
        server.wait(10)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and any(w.pid == server.pid for w in discover_vllm()):
        time.sleep(0.1)
    assert not [w for w in discover_vllm() if w.pid == server.pid]


def test_crashed_sglang_worker_is_swept_with_its_shared_memory(tmp_path: Path, port: int) -> None:
    # Every process of the worker SIGKILLed (a crash: nothing unlinks its segments), then stop: the segments the
    # schedulers held, named as SGLang names its own (sgl_shm_<kind>_<pid>_<hex>), are removed.
    cfg = profile(tmp_path, port)
    sup = Supervisor(cfg, tmp_path / "state", gate=PASS, topology=TOPO, grace_s=2.0)
    try:
        sup.launch("sg")
        sup.wait_ready("sg", timeout=30, poll=0.1)
        deadline = time.monotonic() + 10
        segments: set[str] = set()
        while len(segments) < 2 and time.monotonic() < deadline:
            st = sup.status_one("sg")
            segments = {p for p in procs_shm(st.pids) if "/sgl_shm_sim_" in p}
            time.sleep(0.1)
        assert len(segments) == 2 and all(Path(p).exists() for p in segments)
        for pid in sup.status_one("sg").pids:
            os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while sup.status_one("sg").state is not WorkerState.CRASHED and time.monotonic() < deadline:
            time.sleep(0.1)
        assert all(Path(p).exists() for p in segments)  # the crash left them
        report = sup.stop("sg")
        assert segments <= set(report.swept_shm) and not any(Path(p).exists() for p in segments)
    finally:
        for name in sup.names():
            sup.stop(name, grace=0.2)
        sup.close()
