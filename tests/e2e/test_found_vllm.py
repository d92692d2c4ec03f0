"""A real vLLM (CPU) TP=2 that amdtop did not start, read like its own worker.

Started the way a user starts one on a node (``nohup vllm serve ... > serve.log 2>&1``): no supervisor, no amdtop
marker, its stdout a regular file. One start is shared by the module (a TP=2 start costs ~100 s of both cores);
run-tests starts it ahead of the quiet step (tests/e2e/prestart.py) and the module takes it when it runs.
The pipeline finds it and reads its engine numbers under load, follows its log (vLLM's gloo lines in the Logs pane),
names a rank stopped with SIGSTOP, a ramp runs against it to a knee whose recommendation is its command line, and
``workers adopt`` writes a profile whose launch is the same command line, its API key kept out.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from amdtop.exporter.families import build_families
from amdtop.model import FlagKind, WorkerState, WorkerStatus
from amdtop.pipeline import NodePipeline
from amdtop.pipeline.frame import NodeFrame
from amdtop.report import frame_json
from amdtop.supervisor import Supervisor
from amdtop.supervisor.adopt import parse_flags
from amdtop.supervisor.launchspec import serve_args
from amdtop.telemetry.sim import SimBackend
from tests.e2e.conftest import (
    READY_TIMEOUT_S,
    SERVED_NAME,
    TINY_MODEL,
    VLLM_BIN,
    VLLM_CACHE_ROOT,
    require_vllm,
)
from tests.gates import PASS

pytestmark = [pytest.mark.e2e, pytest.mark.quiet, pytest.mark.timeout(900)]
PORT = 18063
KEY = "e2e-found-secret-key"
"""Its API key (vLLM guards /v1 with it; /health and /metrics stay open): adopt must keep it out of the file."""
HEALTH_WITHIN_S = 15.0
PIDFILE = "server.pid"


def found_argv() -> list[str]:
    return [
        str(VLLM_BIN), "serve", str(TINY_MODEL), "--port", str(PORT), "--tensor-parallel-size", "2",
        "--max-model-len", "4096", "--dtype", "float32", "--served-model-name", SERVED_NAME, "--max-num-seqs", "8",
        "--no-enable-prefix-caching", "--enforce-eager", "--api-key", KEY,
    ]  # fmt: skip


def found_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AMDTOP_")}
    env.update(
        HF_HUB_OFFLINE="1", VLLM_CPU_KVCACHE_SPACE="1", VLLM_CACHE_ROOT=str(VLLM_CACHE_ROOT),
        VLLM_WORKER_MULTIPROC_METHOD="spawn", VLLM_CPU_OMP_THREADS_BIND="0|1",
    )  # fmt: skip
    return env


def start_by_hand(root: Path) -> int:
    """``vllm serve ... > root/serve.log 2>&1`` in its own session, as nohup would leave it; its pid (also in
    ``root/server.pid``)."""
    root.mkdir(parents=True, exist_ok=True)
    VLLM_CACHE_ROOT.mkdir(parents=True, exist_ok=True)
    with open(root / "serve.log", "wb") as out:
        proc = subprocess.Popen(
            found_argv(), env=found_env(), stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
    (root / PIDFILE).write_text(str(proc.pid))
    return proc.pid


def alive(pid: int) -> bool:
    """The server's API server runs (not gone, not a zombie; a process between fork and exec reads an empty
    cmdline, so its stat's state is what tells)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return False
    return stat[stat.rfind(b")") + 2 : stat.rfind(b")") + 3] not in (b"Z", b"X")


def wait_ready(pid: int, log: Path, timeout: float = READY_TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not alive(pid):
            tail = log.read_text(errors="replace").splitlines()[-15:]
            raise AssertionError("the hand-started vLLM ended before ready:\n" + "\n".join(tail))
        try:
            if httpx.get(f"http://127.0.0.1:{PORT}/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(1.0)
    raise AssertionError(f"the hand-started vLLM is not ready after {timeout:g} s; see {log}")


def stop_by_hand(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGTERM)
    except OSError:
        return
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and alive(pid):
        time.sleep(0.5)
    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        pass


@dataclass
class Found:
    pid: int
    root: Path
    pipeline: NodePipeline
    lines: list[tuple[str, str]] = field(default_factory=list)
    """Every (worker, text) line the Logs pane got so far."""
    stop: threading.Event = field(default_factory=threading.Event)
    streams: list[threading.Thread] = field(default_factory=list)
    chunks: list[int] = field(default_factory=lambda: [0])

    @property
    def name(self) -> str:
        return f"vllm-{self.pid}"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{PORT}"

    def tick(self) -> NodeFrame:
        frame = self.pipeline.tick()
        if frame.logs is not None:
            self.lines += [(line.worker, line.text) for line in frame.logs.lines]
        return frame

    def until(self, want: object, timeout: float) -> tuple[float | None, NodeFrame]:
        t0 = time.monotonic()
        frame = self.tick()
        while not want(frame):  # type: ignore[operator]
            if time.monotonic() - t0 > timeout:
                return None, frame
            time.sleep(0.5)
            frame = self.tick()
        return time.monotonic() - t0, frame

    def worker(self, frame: NodeFrame) -> WorkerStatus | None:
        return frame.worker(self.name)

    def cli(self, *args: str, timeout: float = 300.0) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2]), "VLLM_API_KEY": KEY}
        argv = [sys.executable, "-m", "amdtop", *args, "--backend", "none", "--state-dir", str(self.root / "state")]
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False, env=env)


def _stream_forever(env: Found) -> None:
    body = {
        "model": SERVED_NAME,
        "prompt": "the gpu sat on the",
        "max_tokens": 2000,
        "stream": True,
        "ignore_eos": True,
    }
    headers = {"Authorization": f"Bearer {KEY}"}
    while not env.stop.is_set():
        try:
            with (
                httpx.Client(timeout=httpx.Timeout(10.0, read=None)) as client,
                client.stream("POST", f"{env.url}/v1/completions", json=body, headers=headers) as resp,
            ):
                for line in resp.iter_lines():
                    if line.startswith("data: "):
                        env.chunks[0] += 1
                    if env.stop.is_set():
                        return
        except httpx.HTTPError:
            time.sleep(0.5)


def prestarted_in(top: Path) -> tuple[Path, int | None]:
    """``top``/found and the pid of the server started there by hand, when it runs."""
    root = top / "found"
    try:
        pid = int((root / PIDFILE).read_text())
    except (OSError, ValueError):
        return root, None
    return root, pid if alive(pid) else None


def prestarted() -> tuple[Path, int | None]:
    """The server run-tests started ahead of the quiet step (``AMDTOP_E2E_PRESTARTED``), when it runs."""
    top = os.environ.get("AMDTOP_E2E_PRESTARTED")
    return prestarted_in(Path(top)) if top else (Path("."), None)


@pytest.fixture(scope="module")
def found(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Found]:
    """The hand-started TP=2 server (run-tests' prestarted one when it runs), a pipeline watching the node."""
    require_vllm()
    root, pid = prestarted()
    if pid is None:
        root = tmp_path_factory.mktemp("vllm-found")
        pid = start_by_hand(root)
    else:
        print(f"\nE2E found: took the server run-tests started ({root})")
    env = Found(pid, root, NodePipeline(SimBackend(), follow_logs=True))
    try:
        wait_ready(pid, root / "serve.log")
        yield env
    finally:
        env.stop.set()
        for t in env.streams:
            t.join(15)
        env.pipeline.close()
        stop_by_hand(pid)


def _load(env: Found, streams: int = 3) -> None:
    if env.streams:
        return
    for _ in range(streams):
        t = threading.Thread(target=_stream_forever, args=(env,), daemon=True)
        t.start()
        env.streams.append(t)
    deadline = time.monotonic() + 120
    while env.chunks[0] < 50:
        assert time.monotonic() < deadline, "no tokens stream from the hand-started TP=2 server"
        time.sleep(0.2)


def test_engine_numbers_under_load_everywhere(found: Found) -> None:
    _load(found)

    def loaded(frame: NodeFrame) -> bool:
        w = found.worker(frame)
        e = None if w is None else w.engine
        return e is not None and (e.gen_tokens_per_s or 0) > 0 and (e.requests_started or 0) > 0

    # Deadlines, not timing claims: under three endless streams on the VM's two cores (and beside the other servers
    # run-tests started), vLLM's API server answered /metrics after 0.7-6 s now and then (session 21), past the
    # prober's 0.5 s per read; such a scrape reads as no engine numbers until the next one answers in time.
    took, frame = found.until(loaded, 180.0)
    w = found.worker(frame)
    assert took is not None, f"no engine numbers under load: {w}"
    assert w is not None and w.source == "discovered" and w.state is WorkerState.READY
    assert w.log == str(found.root / "serve.log") and w.log_note is None
    assert [r for r, _ in w.rank_pids] == [0, 1] and w.health is not None and w.health.verdict == "ok"
    # the same fields in snapshot --json and the exporter (source="discovered")
    doc = frame_json(frame)
    [j] = [x for x in doc["workers"] if x["name"] == found.name]
    assert j["engine"]["gen_tokens_per_s"] > 0 and j["log"] == w.log and j["source"] == "discovered"
    info = [m for m in build_families(frame) if m.name == "amdtop_worker_info"]
    assert any(s.labels["worker"] == found.name and s.labels["source"] == "discovered" for m in info for s in m.samples)
    # headless, as another process would see it
    for _ in range(10):  # one scrape a snapshot: one that met a stalled /metrics shows no engine, and says so
        done = found.cli("snapshot", "--json")
        assert done.returncode == 0, done.stderr
        [j] = [x for x in json.loads(done.stdout)["workers"] if x["name"] == found.name]
        if j["engine"] is not None:
            break
        time.sleep(2)
    assert j["engine"] is not None and j["log"] == w.log and len(j["rank_pids"]) == 2
    assert KEY not in done.stdout


def test_its_gloo_lines_reach_the_logs_pane(found: Found) -> None:
    # vLLM's parallel_state.py logs each rank's init: "world_size=2 rank=1 local_rank=1 ... backend=gloo" on the CPU
    # (backend=nccl on a GPU, where RCCL/NCCL's own lines follow in the same file).
    took, _frame = found.until(
        lambda f: sum(1 for w, t in found.lines if w == found.name and "backend=gloo" in t) >= 2, 30.0
    )
    assert took is not None, [t for w, t in found.lines if w == found.name][-10:]
    ranks = {t.split(" rank=")[1].split()[0] for w, t in found.lines if w == found.name and "backend=gloo" in t}
    assert ranks == {"0", "1"}


def test_sigstop_rank1_is_named_within_seconds(found: Found) -> None:
    _load(found)
    took, frame = found.until(lambda f: (w := found.worker(f)) is not None and len(w.rank_pids) == 2, 30.0)
    w = found.worker(frame)
    assert w is not None
    rank1 = dict(w.rank_pids)[1]
    os.kill(rank1, signal.SIGSTOP)
    try:

        def named(f: NodeFrame) -> bool:
            flags = [dict(x.extra) for x in f.flags_of(FlagKind.WORKER_STALLED) if x.worker == found.name]
            return any(x["cause"] == "rank_stopped" and x["rank"] == 1 and x["pid"] == rank1 for x in flags)

        took, frame = found.until(named, HEALTH_WITHIN_S)
        assert took is not None, f"rank 1 (pid {rank1}) not named within {HEALTH_WITHIN_S:g} s: {found.worker(frame)}"
        print(f"\nE2E found: SIGSTOP'd rank 1 named in {took:.1f} s")
        h = found.worker(frame).health  # type: ignore[union-attr]
        assert h is not None and (h.verdict, h.rank, h.pid) == ("rank_stopped", 1, rank1)
    finally:
        os.kill(rank1, signal.SIGCONT)
    took, _frame = found.until(lambda f: not f.flags_of(FlagKind.WORKER_STALLED), 30.0)
    assert took is not None


def test_ramp_against_it_finds_a_knee_shown_as_its_command_line(found: Found, tmp_path: Path) -> None:
    found.stop.set()  # the ramp alone loads the server
    for t in found.streams:
        t.join(15)
    out = tmp_path / "ramp.json"
    done = found.cli(
        "ramp", "--url", found.url, "--model", SERVED_NAME, "--concurrency", "1,2,4", "--step-seconds", "3",
        "--warmup-seconds", "1", "--input-len", "32", "--output-len", "32", "--no-refine", "--json", str(out),
        timeout=600.0,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    doc = json.loads(out.read_text())
    assert doc["knee"] is not None and doc["knee"]["concurrency"] in (1, 2, 4)
    cmd = doc["recommendation"]["command_line"]
    assert cmd["before"].split(" serve ", 1)[1] == " ".join([*found_argv()[2:-1], "***"])
    for key, value in doc["recommendation"]["changes"].items():
        assert f"--{key} {value}" in cmd["after"]
    assert KEY not in out.read_text() and KEY not in done.stderr and "now:" in done.stderr


def test_adopt_writes_a_profile_that_launches_the_same_command_line(found: Found, tmp_path: Path) -> None:
    config = tmp_path / "workers.toml"
    done = found.cli("workers", "adopt", found.name, "--as", "found", "--yes", "--config", str(config))
    assert done.returncode == 0, done.stderr
    text = config.read_text()
    assert KEY not in text and KEY not in done.stdout and KEY not in done.stderr
    assert "args.api-key: a secret, kept out of the file" in text
    sup = Supervisor(config, tmp_path / "state", gate=PASS, topology=SimBackend().topology())
    try:
        profile = sup.profile("found")
    finally:
        sup.close()
    assert profile.gpus == () and dict(profile.env)["VLLM_CPU_OMP_THREADS_BIND"] == "0|1"
    relaunch = serve_args(profile)
    original = found_argv()
    # the same program (its interpreter first, as /proc shows a script), model and flags with the same values; the
    # key stays out of the file and comes from VLLM_API_KEY; --host 0.0.0.0 is vllm serve's own default spelled out
    assert relaunch[relaunch.index("serve") - 1 :][:3] == original[:3]
    want = dict(parse_flags(original[3:-2], "want"))
    got = dict(parse_flags(relaunch[relaunch.index("serve") + 2 :], "got"))
    assert got.pop("host") == "0.0.0.0"
    assert got == want


def test_zz_a_crashed_rank_is_named_like_an_own_workers(found: Found) -> None:
    # Last in the module: it ends the server. Rank 1 dies of SIGSEGV. As for an own worker, the look at the ranks
    # names it (its zombie's wait status says the signal), and the log it wrote to its stdout file gives one
    # worker_crashed incident with the signal (tvm_ffi's "Segfault encountered" or faulthandler's line).
    took, frame = found.until(lambda f: (w := found.worker(f)) is not None and len(w.rank_pids) == 2, 30.0)
    w = found.worker(frame)
    assert w is not None
    rank1 = dict(w.rank_pids)[1]
    os.kill(rank1, signal.SIGSEGV)

    def named(f: NodeFrame) -> bool:
        now = found.worker(f)
        dead = now is not None and now.health is not None and (now.health.verdict, now.health.rank) == ("rank_dead", 1)
        told = any(i.kind == "worker_crashed" and i.worker == found.name for i in f.incidents)
        return dead and told

    took, frame = found.until(named, 60.0)
    now = found.worker(frame)
    assert took is not None, f"crash not named: {now}; incidents {frame.incidents}"
    (crash,) = [i for i in frame.incidents if i.kind == "worker_crashed" and i.worker == found.name]
    assert now is not None and now.health is not None
    print(f"\nE2E found: {now.state.value}: {now.health.message}; incident: {crash.summary}")
    assert now.health.pid == rank1 and "killed by SIGSEGV" in now.health.message
    assert crash.signal == "SIGSEGV"
