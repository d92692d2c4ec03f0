"""Servers amdtop did not start, read like its own: engine numbers, ranks, health and log, through the pipeline.

The servers are real processes started here by hand (``subprocess.Popen``, no supervisor, no amdtop marker): the SGLang
stand-in (tests/fakes/sglang: SGLang's own argv, schedulers titled as SGLang titles them, ``/metrics`` the captured page
of tests/fixtures/sglang_metrics/sglang-docs-overloaded.txt, source in its first line), its stdout a file, a pipe or a
terminal.
"""

from __future__ import annotations

import json
import os
import pty
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

import pytest

from amdtop.analysis.found_log import container_id, find_log, systemd_unit
from amdtop.model import WorkerState, WorkerStatus
from amdtop.pipeline import NodePipeline
from amdtop.report import frame_json
from amdtop.telemetry.sim import SimBackend
from tests.gates import PASS

FAKES = Path(__file__).resolve().parents[1] / "fakes"
PAGE = Path(__file__).resolve().parents[1] / "fixtures" / "sglang_metrics" / "sglang-docs-overloaded.txt"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_sglang(port: int, stdout: int | IO[bytes]) -> subprocess.Popen[bytes]:
    """SGLang's command line as a user types it, with the stand-in package first on the path (NCCL_DEBUG=INFO: the
    stand-in then prints its ranks' RCCL init lines)."""
    env = {**os.environ, "PYTHONPATH": f"{FAKES}{os.pathsep}{os.environ.get('PYTHONPATH', '')}", "NCCL_DEBUG": "INFO"}
    argv = [sys.executable, "-m", "sglang.launch_server", "--model-path", "meta-llama/Llama-3.1-8B-Instruct",
            "--port", str(port), "--tp-size", "2", "--enable-metrics", "--metrics-page", str(PAGE)]  # fmt: skip
    return subprocess.Popen(argv, env=env, stdout=stdout, stderr=subprocess.STDOUT, start_new_session=True)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def found_until(
    pipeline: NodePipeline, clock: Clock, pid: int, ok: Callable[[WorkerStatus], object], timeout: float = 30.0
) -> WorkerStatus:
    """Tick (each tick 31 s later on the pipeline's clock: a look and a full walk each time) until ``ok(worker)``."""
    deadline = time.monotonic() + timeout
    last: WorkerStatus | None = None
    while time.monotonic() < deadline:
        clock.now += 31.0
        frame = pipeline.tick()
        last = next((w for w in frame.workers if w.pid == pid), None)
        if last is not None and ok(last):
            return last
        time.sleep(0.2)
    raise AssertionError(f"not seen in time: {last}")


@pytest.fixture
def stop_after() -> Iterator[list[subprocess.Popen[bytes]]]:
    procs: list[subprocess.Popen[bytes]] = []
    yield procs
    for p in procs:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGTERM)
            p.wait(10)


def test_hand_started_sglang_reads_like_an_own_worker(tmp_path: Path, stop_after: list) -> None:  # type: ignore[type-arg]
    port = free_port()
    log = tmp_path / "serve.log"
    with open(log, "wb") as out:
        server = start_sglang(port, out)
    stop_after.append(server)
    clock = Clock()
    pipeline = NodePipeline(SimBackend(), clock=clock, follow_logs=True)
    try:
        w = found_until(pipeline, clock, server.pid, lambda w: w.engine is not None and len(w.rank_pids) == 2)
        assert w.name == f"sglang-{server.pid}" and w.source == "discovered" and w.state is WorkerState.READY
        e = w.engine
        assert e is not None and e.kind == "sglang"
        # the captured page: 162 running, 2826 queued at token usage 0.28
        assert (e.running, e.waiting, e.kv_cache_usage) == (162, 2826, 0.28)
        assert e.cache_hit_rate == pytest.approx(0.0075, abs=1e-4)
        assert w.log == str(log) and w.log_note is None
        assert [r.rank for r in w.ranks] == [0, 1] and w.health is not None and w.health.verdict == "ok"
        frame = pipeline.tick()
        # its TP group is judged with the others (the imbalance flag's window), on the GPUs discovery gave it
        [group] = [g for g in frame.groups if g.worker == w.name]
        assert group.gpus == w.gpus and group.samples > 0 and group.vram_spread_pct is not None
        doc = frame_json(frame)
        [j] = [x for x in doc["workers"] if x["name"] == w.name]
        assert j["source"] == "discovered" and j["engine"]["running"] == 162 and j["log"] == str(log)
        assert j["log_note"] is None and [r["rank"] for r in j["rank_pids"]] == [0, 1]
        json.dumps(doc)
        # Its stdout file is followed as an own worker's log is: the RCCL init lines become its communicator.
        deadline = time.monotonic() + 20
        logs = None
        while time.monotonic() < deadline:
            frame = pipeline.tick()
            logs = frame.logs.worker(w.name) if frame.logs is not None else None
            if logs is not None and logs.comms:
                break
            time.sleep(0.2)
        assert logs is not None and logs.comms and logs.comms[0].nranks == 2
        # A rank stopped by hand is named within one look (the same stat read as an own worker's ranks).
        rank1 = dict(w.rank_pids)[1]
        os.kill(rank1, signal.SIGSTOP)
        try:
            w = found_until(pipeline, clock, server.pid, lambda w: w.health and w.health.verdict == "rank_stopped")
            assert w.health is not None and (w.health.rank, w.health.pid) == (1, rank1)
        finally:
            os.kill(rank1, signal.SIGCONT)
    finally:
        pipeline.close()


def test_one_look_per_cadence(tmp_path: Path, stop_after: list) -> None:  # type: ignore[type-arg]
    port = free_port()
    server = start_sglang(port, subprocess.DEVNULL)
    stop_after.append(server)
    clock = Clock()
    pipeline = NodePipeline(SimBackend(), clock=clock)
    try:
        name = found_until(pipeline, clock, server.pid, lambda w: w.engine is not None and len(w.rank_pids) == 2).name
        assert pipeline.found is not None
        # this server's looks only: a server another test starts meanwhile takes a look of its own
        looks = pipeline.found.looks[name]
        for _ in range(5):  # five ticks within the workers' cadence: the last look is handed again
            clock.now += 0.3
            pipeline.tick()
        assert pipeline.found.looks[name] == looks
        clock.now += 2.0
        pipeline.tick()
        assert pipeline.found.looks[name] == looks + 1
    finally:
        pipeline.close()


def test_a_pipe_says_why_no_log(stop_after: list) -> None:  # type: ignore[type-arg]
    server = start_sglang(free_port(), subprocess.PIPE)
    stop_after.append(server)
    found = find_log(server.pid)
    assert found.path is None and found.note is not None
    assert found.note.startswith("log not readable: stdout is a pipe (pipe:[") and "> serve.log 2>&1" in found.note


def test_a_terminal_says_why_no_log(stop_after: list) -> None:  # type: ignore[type-arg]
    leader, follower = pty.openpty()
    try:
        server = start_sglang(free_port(), follower)
        stop_after.append(server)
        note = find_log(server.pid).note
        assert note is not None and note.startswith("log not readable: stdout is a terminal (/dev/pts/")
    finally:
        os.close(leader)
        os.close(follower)


def test_stdout_and_stderr_files_apart_are_both_followed(tmp_path: Path) -> None:
    out, err = tmp_path / "out.log", tmp_path / "err.log"
    with open(out, "wb") as o, open(err, "wb") as e:
        proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], stdout=o, stderr=e)
    try:
        found = find_log(proc.pid)
        assert found.paths == (str(out), str(err)) and found.path == str(out)
    finally:
        proc.kill()
        proc.wait()


# /proc/PID/cgroup lines built from the formats the runtimes document (cgroup v2 "0::PATH"; docker's systemd cgroup
# driver "docker-<id>.scope", its cgroupfs driver "/docker/<id>"; podman "libpod-<id>.scope"; a systemd service).
CID = "4f1c9a7d2b3e" + "0" * 52


@pytest.mark.parametrize(
    "text",
    [
        f"0::/system.slice/docker-{CID}.scope\n",
        f"12:memory:/docker/{CID}\n1:name=systemd:/docker/{CID}\n",
        f"0::/machine.slice/libpod-{CID}.scope/container\n",
        f"0::/kubepods.slice/kubepods-burstable.slice/cri-containerd-{CID}.scope\n",
    ],
)
def test_container_id_from_cgroup(text: str) -> None:
    assert container_id(text) == CID


def test_systemd_unit_from_cgroup() -> None:
    assert systemd_unit("0::/system.slice/vllm-llama.service\n") == "vllm-llama.service"
    assert systemd_unit("0::/user.slice/user-1000.slice/session-3.scope\n") is None
    assert container_id("0::/system.slice/vllm-llama.service\n") is None


def _flags(argv: list[str] | tuple[str, ...], after: str) -> dict[str, object]:
    from amdtop.supervisor.adopt import parse_flags

    words = list(argv)
    rest = words[words.index(after) + 1 :]
    if rest and not rest[0].startswith("-"):
        rest = rest[1:]  # vllm serve's positional model
    return dict(parse_flags(rest, "test"))


def test_adopt_writes_a_profile_that_relaunches_the_same_argv_without_secrets(
    tmp_path: Path,
    stop_after: list,  # type: ignore[type-arg]
    capsys: pytest.CaptureFixture[str],
) -> None:
    from amdtop.cli.main import main
    from amdtop.procinfo import read_cmdline
    from amdtop.supervisor import Supervisor
    from amdtop.supervisor.launchspec import serve_args

    port = free_port()
    env = {**os.environ, "PYTHONPATH": f"{FAKES}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
           "HF_TOKEN": "hf_abcdefsecret", "NCCL_DEBUG": "INFO", "SSH_CONNECTION": "10.0.0.1 22 10.0.0.2 22"}  # fmt: skip
    argv = [sys.executable, "-m", "sglang.launch_server", "--model-path", "meta-llama/Llama-3.1-8B-Instruct",
            "--port", str(port), "--tp-size", "2", "--enable-metrics", "--metrics-page", str(PAGE),
            "--mem-fraction-static", "0.85", "--api-key", "sk-verysecret"]  # fmt: skip
    server = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, start_new_session=True)
    stop_after.append(server)
    name = f"sglang-{server.pid}"
    deadline = time.monotonic() + 20
    from amdtop.analysis import discover_vllm

    while time.monotonic() < deadline and not any(w.name == name for w in discover_vllm()):
        time.sleep(0.1)
    cfg, state = tmp_path / "workers.toml", tmp_path / "state"
    common = ["--backend", "sim", "--config", str(cfg), "--state-dir", str(state)]
    # Without --yes and without a terminal nothing is written, and it says how to write it.
    assert main(["workers", "adopt", name, *common]) == 1
    assert not cfg.exists() and "add --yes" in capsys.readouterr().err
    assert main(["workers", "adopt", name, "--as", "sg", "--yes", *common]) == 0
    out = capsys.readouterr()
    text = cfg.read_text()
    for secret in ("sk-verysecret", "hf_abcdefsecret"):
        assert secret not in text and secret not in out.out and secret not in out.err
    assert "args.api-key: a secret, kept out of the file" in text and "env.HF_TOKEN: a secret" in text
    assert "SSH_CONNECTION" not in text and 'NCCL_DEBUG = "INFO"' in text
    sup = Supervisor(cfg, state, gate=PASS, topology=SimBackend().topology())
    try:
        profile = sup.profile("sg")
        relaunch = serve_args(profile)
        assert relaunch[: relaunch.index("sglang.launch_server") + 1] == argv[:3]
        want = _flags(argv, "sglang.launch_server")
        del want["api-key"]  # the secret stays out of the file
        got = _flags(relaunch, "sglang.launch_server")
        assert got.pop("host") == "127.0.0.1"  # SGLang's own default, now spelled out
        assert got == want
        # Its next start is amdtop's: stop the hand-started one, launch the profile, the same command line runs.
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(10)
        sup.launch("sg")
        st = sup.wait_ready("sg", timeout=30, poll=0.1)
        running = read_cmdline(st.pid or 0)
        assert _flags(running, "sglang.launch_server") == {**want, "host": "127.0.0.1"}
    finally:
        sup.stop("sg", grace=2.0)
        sup.close()


def test_knee_recommendation_for_a_found_server_is_its_command_line(tmp_path: Path, stop_after: list) -> None:  # type: ignore[type-arg]
    import asyncio

    from amdtop.ramp import Ramp, RampConfig

    port = free_port()
    server = start_sglang(port, subprocess.DEVNULL)
    stop_after.append(server)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                break
        except OSError:
            time.sleep(0.1)
    cfg = RampConfig(url=url, model="meta-llama/Llama-3.1-8B-Instruct", concurrencies=(1, 2, 4), step_seconds=0.6,
                     warmup_seconds=0.1, input_len=8, output_len=8, refine_points=0, record=False)  # fmt: skip
    doc = asyncio.run(Ramp(cfg, tmp_path).run()).to_json()
    assert doc["knee"] is not None
    cmd = doc["recommendation"]["command_line"]
    changes = doc["recommendation"]["changes"]
    assert changes and cmd["before"].endswith("--metrics-page " + str(PAGE))
    for key, value in changes.items():
        assert f"--{key} {value}" in cmd["after"] and f"--{key}" not in cmd["before"]
    assert "does not restart what it did not start" in cmd["note"]


def test_apply_changes_replaces_in_place_and_appends() -> None:
    from amdtop.ramp.cmdline import apply_changes, command_line_change

    argv = ["vllm", "serve", "m", "--max-num-seqs=64", "--served-model-name", "a", "b", "--api-key", "k1"]
    assert apply_changes(argv, {"max-num-seqs": "8", "gpu-memory-utilization": "0.92"}) == [
        "vllm", "serve", "m", "--max-num-seqs", "8", "--served-model-name", "a", "b", "--api-key", "k1",
        "--gpu-memory-utilization", "0.92",
    ]  # fmt: skip
    change = command_line_change(argv, {"served-model-name": "c"})
    assert change is not None and "k1" not in change["before"] and "k1" not in change["after"]
    assert "--served-model-name c --api-key ***" in change["after"]
    assert command_line_change(argv, {}) is None


def test_launch_gate_counts_a_found_server_on_the_target_gpus(stop_after: list) -> None:  # type: ignore[type-arg]
    from amdtop.audit.gate import LaunchGate
    from amdtop.supervisor.profiles import Profile

    env = {**os.environ, "PYTHONPATH": f"{FAKES}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
           "HIP_VISIBLE_DEVICES": "4,5"}  # fmt: skip
    argv = [sys.executable, "-m", "sglang.launch_server", "--model-path", "m", "--port", str(free_port()),
            "--tp-size", "2", "--metrics-page", str(PAGE)]  # fmt: skip
    server = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, start_new_session=True)
    stop_after.append(server)
    from amdtop.analysis import discover_vllm

    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if any(w.pid == server.pid and len(w.rank_pids) == 2 for w in discover_vllm()):
            break
        time.sleep(0.1)
    sim = SimBackend()
    gate = LaunchGate(sim.topology(), sim.sample)
    on = Profile(name="new", model="m", gpus=(5, 6), numa_node="none", port=free_port())
    [finding] = [f for f in gate.check(on) if f.id == "leftover_vllm"]
    [line] = [e for e in finding.evidence if f"sglang-{server.pid}" in e]
    assert line.startswith("GPU 5: pid ") and "rank 1 of" in line and finding.gpus == (5,)
    off = Profile(name="other", model="m", gpus=(6, 7), numa_node="none", port=free_port())
    assert not [f for f in gate.check(off) if f.id == "leftover_vllm"]


@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs util-linux unshare")
def test_a_server_in_another_network_namespace_gets_its_published_url_or_says_give_its_url(
    stop_after: list,  # type: ignore[type-arg]
) -> None:
    from amdtop.analysis.found_port import local_addresses, reachable_url

    # A process in a network namespace of its own, as a container's (unshare -n needs CAP_SYS_ADMIN: root here).
    inside = subprocess.Popen(["unshare", "-n", "sleep", "60"], start_new_session=True)
    stop_after.append(inside)
    deadline = time.monotonic() + 10
    pid = None
    while pid is None and time.monotonic() < deadline:
        kids = Path(f"/proc/{inside.pid}/task/{inside.pid}/children").read_text().split()
        pid = (
            int(kids[0])
            if kids
            else (inside.pid if Path(f"/proc/{inside.pid}/exe").resolve().name == "sleep" else None)
        )
        time.sleep(0.05)
    assert pid is not None
    if os.readlink(f"/proc/{pid}/ns/net") == os.readlink("/proc/self/ns/net"):
        pytest.skip("unshare -n did not give a namespace of its own (no CAP_SYS_ADMIN)")
    url, note = reachable_url(pid, 8000, "http://127.0.0.1:8000")
    assert url is None and note == (
        "in a container, port 8000 not published: give its URL (e.g. amdtop ramp --url http://HOST:PORT)"
    )
    assert local_addresses(pid) == set()  # only loopback in it
    # docker's userland proxy as moby's portmapper starts it (libnetwork/portmapper/proxy_linux.go): the argv is
    # the real one after a stand-in's own words (a Python that sleeps, titled docker-proxy)
    proxy = subprocess.Popen(
        ["docker-proxy", "-c", "import time; time.sleep(60)", "-proto", "tcp", "-host-ip", "0.0.0.0",
         "-host-port", "18999", "-container-ip", "172.17.0.2", "-container-port", "8000"],
        executable=sys.executable, start_new_session=True,
    )  # fmt: skip
    stop_after.append(proxy)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        url, note = reachable_url(pid, 8000, "http://127.0.0.1:8000")
        if url is not None:
            break
        time.sleep(0.05)
    assert url == "http://127.0.0.1:18999" and note == "in a container: its port 8000 is published at " + url
    assert reachable_url(os.getpid(), 8000, "http://127.0.0.1:8000") == ("http://127.0.0.1:8000", None)


def test_a_found_server_that_ends_stays_shown_stopped_then_leaves(tmp_path: Path, stop_after: list) -> None:  # type: ignore[type-arg]
    from amdtop.pipeline.found import GONE_KEEP_S

    log = tmp_path / "serve.log"
    with open(log, "wb") as out:
        server = start_sglang(free_port(), out)
    stop_after.append(server)
    clock = Clock()
    pipeline = NodePipeline(SimBackend(), clock=clock, follow_logs=True)
    try:
        found_until(pipeline, clock, server.pid, lambda w: w.engine is not None and len(w.rank_pids) == 2)
        name = f"sglang-{server.pid}"
        os.killpg(server.pid, signal.SIGTERM)  # its user stops it: no error in its log
        server.wait(10)
        time.sleep(0.5)
        clock.now += 2.0
        frame = pipeline.tick()
        w = frame.worker(name)
        assert w is not None and w.state is WorkerState.STOPPED and w.pids == () and w.log == str(log)
        assert w.error_line is None and w.engine is None
        clock.now += GONE_KEEP_S + 1
        assert pipeline.tick().worker(name) is None
    finally:
        pipeline.close()


@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs util-linux unshare")
def test_a_server_in_its_own_pid_and_network_namespace_is_found_with_its_log_and_says_give_its_url(
    tmp_path: Path,
    stop_after: list,  # type: ignore[type-arg]
) -> None:
    # As a container runs it: its own PID namespace (pid 1 inside) and network namespace; the host sees its processes
    # under host pids, its stdout file through /proc/PID/fd/1, and nothing listening on the host for its port.
    env = {**os.environ, "PYTHONPATH": f"{FAKES}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    port = free_port()
    argv = ["unshare", "-p", "-f", "-n", "--mount-proc", sys.executable, "-m", "sglang.launch_server",
            "--model-path", "m", "--port", str(port), "--tp-size", "2", "--metrics-page", str(PAGE)]  # fmt: skip
    log = tmp_path / "serve.log"
    with open(log, "wb") as out:
        outer = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    stop_after.append(outer)
    clock = Clock()
    pipeline = NodePipeline(SimBackend(), clock=clock, follow_logs=True)
    try:

        def inside(w: WorkerStatus) -> bool:
            return w.engine_kind == "sglang" and len(w.rank_pids) == 2 and w.log == str(log)

        deadline = time.monotonic() + 30
        w = None
        while time.monotonic() < deadline and w is None:
            clock.now += 31.0
            w = next((x for x in pipeline.tick().workers if inside(x)), None)
            time.sleep(0.2)
        if w is None and os.readlink(f"/proc/{outer.pid}/ns/pid") == os.readlink("/proc/self/ns/pid"):
            pytest.skip("unshare could not make namespaces here (no CAP_SYS_ADMIN)")
        assert w is not None and w.pid is not None and w.pid != outer.pid
        assert os.readlink(f"/proc/{w.pid}/ns/pid") != os.readlink("/proc/self/ns/pid")  # found from the host
        assert w.url is None and w.engine is None
        assert (
            w.note
            == f"in a container, port {port} not published: give its URL (e.g. amdtop ramp --url http://HOST:PORT)"
        )
        assert w.health is not None and w.health.verdict == "ok"
    finally:
        pipeline.close()
