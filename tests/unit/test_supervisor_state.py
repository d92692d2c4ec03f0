"""State files, log rotation, secret masking, /metrics parsing, retune diff and write-back, readonly, demo profiles."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from amdtop.errors import InputError
from amdtop.model import WorkerState
from amdtop.supervisor import Supervisor
from amdtop.supervisor.demo import DEMO_FILE, feed_demand
from amdtop.supervisor.metrics import EngineMeter, parse_samples
from amdtop.supervisor.state import StateStore, WorkerRecord, mask_env, rotate_log, tail_lines
from amdtop.telemetry.sim import SimBackend
from tests.gates import PASS

TOPO = SimBackend().topology()
CAPTURE = Path("/work/shared/data/vllm-cpu/metrics-tp1.txt")

PROFILE = """# top comment
[[worker]]
name = "a"  # first worker
model = "m"
gpus = [0, 1]
port = 18030
command = ["vllm", "serve"]
[worker.args]
# the batch size
max-num-seqs = 256
gpu-memory-utilization = 0.9

[[worker]]
name = "b"
model = "m"
gpus = [4]
port = 18031
"""


def record(**kw: object) -> WorkerRecord:
    base: dict[str, object] = dict(
        name="a", launch_id="abc", pid=123, pgid=123, start_ticks=999, started_at=1.5, argv=("numactl", "x"),
        env={"A": "1"}, log="/tmp/a.log", port=18030, url="http://127.0.0.1:18030", gpus=(0, 1), numa_node=0,
    )  # fmt: skip
    base.update(kw)
    return WorkerRecord(**base)  # type: ignore[arg-type]


def test_state_round_trip(tmp_path: Path) -> None:
    store = StateStore(tmp_path)
    rec = record(
        restarts=3, known=((123, 999), (124, 1000)), shm=("/dev/shm/vllm_x",), dist_ids=("f" * 32,), log_offset=7
    )
    store.save(rec)
    assert store.load("a") == rec
    assert store.names() == ["a"]
    assert not list((tmp_path / "workers").glob("*.tmp"))
    (tmp_path / "workers" / "b.json").write_text("{torn")
    assert store.load("b") is None and store.load("zzz") is None


def test_mask_env() -> None:
    env = {
        "HF_TOKEN": "hf_x",
        "GITHUB_TOKEN": "g",
        "API_KEY": "k",
        "MY_SECRET_X": "s",
        "DB_PASSWORD": "p",
        "PATH": "/bin",
    }
    masked = mask_env(env)
    assert masked["PATH"] == "/bin" and all(v == "***" for k, v in masked.items() if k != "PATH")


def test_rotate_log_copy_truncate(tmp_path: Path) -> None:
    log = tmp_path / "w.log"
    with open(log, "ab") as held:  # the worker's O_APPEND handle keeps working after rotation
        held.write(b"x" * 100 + b"\nlast old line\n")
        held.flush()
        assert not rotate_log(log, 1000)
        assert rotate_log(log, 50, backups=2)
        held.write(b"new line\n")
        held.flush()
    assert log.read_bytes() == b"new line\n"
    assert (tmp_path / "w.log.1").read_bytes().endswith(b"last old line\n")
    log.write_bytes(b"y" * 60)
    assert rotate_log(log, 50, backups=2)
    assert (tmp_path / "w.log.2").exists() and (tmp_path / "w.log.1").read_bytes() == b"y" * 60
    assert tail_lines(tmp_path / "w.log.2", 1) == ("last old line",)


def test_metrics_capture_and_old_names() -> None:
    s = parse_samples(CAPTURE.read_text())
    assert s["vllm:generation_tokens_total"] == 32.0 and s["vllm:num_requests_running"] == 0.0
    t = iter([0.0, 2.0, 4.0])
    meter = EngineMeter(clock=lambda: next(t))
    old = 'vllm:gpu_cache_usage_perc{engine="0"} 0.25\nvllm:num_requests_running{engine="0"} 3\n'
    first = meter.update(old + 'vllm:generation_tokens_total{engine="0",model_name="m"} 100\n')
    assert first.kv_cache_usage == 0.25 and first.running == 3 and first.gen_tokens_per_s is None
    second = meter.update(old + 'vllm:generation_tokens_total{engine="0",model_name="m"} 300\n')
    assert second.gen_tokens_per_s == 100.0
    # A counter reset (server restarted) yields no rate rather than a negative one.
    assert meter.update(old + "vllm:generation_tokens_total 10\n").gen_tokens_per_s is None


def test_retune_diff_writeback_keeps_comments(tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text(PROFILE)
    sup = Supervisor(cfg, tmp_path / "st", gate=PASS, topology=TOPO)
    diff = sup.retune_diff(
        "a", {"max_num_seqs": "64", "block-size": "32", "numa_node": "1", "env.HF_TOKEN": "hf_secret"}
    )
    assert diff == (
        "worker a:\n  args.max-num-seqs: 256 -> 64\n  args.block-size: (unset) -> 32\n  numa_node: auto -> 1\n"
        "  env.HF_TOKEN: (unset) -> ***"
    )
    assert cfg.read_text() == PROFILE  # diff writes nothing
    st = sup.retune("a", {"max-num-seqs": "64", "env.NCCL_DEBUG": "INFO"})
    assert st.state is WorkerState.STOPPED  # not running: written, not started
    text = cfg.read_text()
    assert "# top comment" in text and "# the batch size" in text and "# first worker" in text
    assert "max-num-seqs = 64" in text and 'NCCL_DEBUG = "INFO"' in text
    assert text.index('name = "a"') < text.index('name = "b"')
    assert sup.profile("a").arg("max-num-seqs") == 64
    reloaded = Supervisor(cfg, tmp_path / "st", gate=PASS, topology=TOPO)
    assert dict(reloaded.profile("a").env) == {"NCCL_DEBUG": "INFO"}


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"max-num-seqs": "many"}, "worker[a].args.max-num-seqs: 'many' is not an integer; e.g. max-num-seqs=64"),
        (
            {"gpu-memory-utilization": "1.5"},
            "worker[a].args.gpu-memory-utilization: 1.5 is outside (0, 1]; e.g. gpu-memory-utilization=0.9",
        ),
        ({"block-size": "24"}, "worker[a].args.block-size: 24 is not a power of two; e.g. block-size=16"),
        (
            {"max-num-seqs": "99999999999999999999999"},
            "worker[a].args.max-num-seqs: 99999999999999999999999 is outside 1..65536; e.g. max-num-seqs=64",
        ),
        ({"max-model-len": "0"}, "worker[a].args.max-model-len: 0 is outside 1..2147483647; e.g. max-model-len=64"),
        ({"block-size": "8192"}, "worker[a].args.block-size: 8192 is outside 1..4096; e.g. block-size=16"),
        (
            {"gpu-memory-utilization": "nan"},
            "worker[a].args.gpu-memory-utilization: 'nan' is not a finite number; e.g. gpu-memory-utilization=0.9",
        ),
        (
            {"gpu-memory-utilization": "0"},
            "worker[a].args.gpu-memory-utilization: 0 is outside (0, 1]; e.g. gpu-memory-utilization=0.9",
        ),
        (
            {"dtype": "half"},
            "worker[a].dtype: cannot be retuned; use one of max-num-seqs, gpu-memory-utilization, block-size, max-model-len, max-num-batched-tokens, data-parallel-size, api-server-count, enable-expert-parallel, enforce-eager, disable-custom-all-reduce, numa_node, env.NAME",
        ),
        (
            {"numa_node": "7"},
            'worker[a].numa_node: NUMA node 7 does not exist (this node has 0-1); use one of 0-1, "auto" or "none"',
        ),
    ],
)
def test_retune_rejects(tmp_path: Path, changes: dict[str, str], message: str) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text(PROFILE)
    sup = Supervisor(cfg, tmp_path / "st", gate=PASS, topology=TOPO)
    with pytest.raises(InputError) as exc:
        sup.retune("a", changes)
    assert str(exc.value) == message
    assert cfg.read_text() == PROFILE


def test_readonly_refuses_control(tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text(PROFILE)
    sup = Supervisor(cfg, tmp_path / "st", gate=PASS, topology=TOPO, readonly=True)
    for call in (lambda: sup.launch("a"), lambda: sup.stop("a"), lambda: sup.retune("a", {"max-num-seqs": "2"})):
        with pytest.raises(InputError, match="--readonly"):
            call()
    assert [s.state for s in sup.status()] == [WorkerState.STOPPED, WorkerState.STOPPED]
    with pytest.raises(InputError, match=r"worker\[zz\]: no such worker"):
        sup.status_one("zz")


def test_demo_profiles_and_demand(tmp_path: Path) -> None:
    sim = SimBackend()
    sup = Supervisor(tmp_path / "ignored.toml", tmp_path / "st", gate=PASS, topology=sim.topology(), demo=True, sim=sim)
    assert (tmp_path / "st" / DEMO_FILE).exists()
    assert sup.names() == ["llama-70b", "qwen-32b", "mistral-7b"]
    p = sup.profile("llama-70b")
    assert p.command == (sys.executable, "-m", "amdtop.simserver") and p.gpus == (0, 1, 2, 3)
    statuses = sup.status()
    feed_demand(
        sim,
        [p],
        [statuses[0].__class__(**{**_fields(statuses[0]), "state": WorkerState.READY, "pid": 42})],
        sim.topology(),
    )
    snap = sim.sample()
    assert all(snap.gpus[i].vram_used_bytes > 100 * 1024**3 for i in range(4))  # type: ignore[operator]
    assert snap.gpus[5].vram_used_bytes < 1024**3  # type: ignore[operator]
    feed_demand(sim, [p], [statuses[0]], sim.topology())  # stopped: demand removed
    assert sim.sample().gpus[0].vram_used_bytes < 1024**3  # type: ignore[operator]


def _fields(obj: object) -> dict[str, object]:
    return {k: getattr(obj, k) for k in obj.__slots__}  # type: ignore[attr-defined]


def test_status_json_shape(tmp_path: Path) -> None:
    from amdtop.cli.main import main

    cfg = tmp_path / "c.toml"
    cfg.write_text(PROFILE)
    import io
    from contextlib import redirect_stdout

    buf = io.StringIO()
    with redirect_stdout(buf):
        rc = main(
            [
                "--backend",
                "sim",
                "--config",
                str(cfg),
                "--state-dir",
                str(tmp_path / "st"),
                "workers",
                "status",
                "--json",
            ]
        )
    assert rc == 0
    doc = json.loads(buf.getvalue())
    keys = {
        "name",
        "state",
        "pid",
        "pgid",
        "gpus",
        "numa_node",
        "port",
        "url",
        "cpu_affinity",
        "mems_allowed",
        "log",
        "restarts",
    }
    assert [d["name"] for d in doc] == ["a", "b"] and all(keys <= set(d) for d in doc)
    assert doc[0]["state"] == "stopped" and doc[0]["gpus"] == [0, 1]


def test_cli_bad_profile_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from amdtop.cli.main import main

    cfg = tmp_path / "c.toml"
    cfg.write_text(PROFILE.replace("gpus = [4]", "gpus = [1]"))
    rc = main(["--backend", "sim", "--config", str(cfg), "--state-dir", str(tmp_path / "st"), "workers", "launch", "a"])
    assert rc == 2
    assert capsys.readouterr().err == (
        "amdtop: error: worker[b].gpus: GPU 1 is already used by worker a; give each worker its own GPUs\n"
    )
    assert not (tmp_path / "st" / "workers").exists()


def _fake_proc(tmp: Path, envs: dict[int, dict[str, str]]) -> Path:
    for pid, env in envs.items():
        d = tmp / str(pid)
        d.mkdir(parents=True)
        (d / "environ").write_bytes(b"".join(f"{k}={v}\0".encode() for k, v in env.items()))
    return tmp


def test_members_need_an_anchor_in_the_group(tmp_path: Path) -> None:
    from amdtop.supervisor.procs import ProcStat, members

    def st(pid: int, ppid: int, pgid: int, ticks: int = 200) -> ProcStat:
        return ProcStat(pid, ppid, pgid, pgid, "S", ticks, "x")

    ours = {"AMDTOP_WORKER": "w:abc"}
    # Group 100 after our launch died and PID 100 was reused: no member is positively ours -> nothing is ours.
    reused = {100: st(100, 1, 100), 101: st(101, 100, 100)}
    proc = _fake_proc(tmp_path / "a", {100: {"PATH": "/bin"}, 101: {}})
    assert members(pgid=100, start_ticks=150, marker="w:abc", table=reused, proc=proc) == set()
    # Our API server was SIGKILLed; EngineCore (environment clobbered by setproctitle) and the resource tracker (marker
    # intact) live on in the group: the tracker anchors the group, EngineCore's child follows by parent chain.
    orphans = {102: st(102, 1, 100), 103: st(103, 1, 100), 104: st(104, 102, 100), 105: st(105, 1, 100)}
    proc = _fake_proc(tmp_path / "b", {102: {}, 103: ours, 104: {}, 105: {"AMDTOP_WORKER": "other:1"}})
    assert members(pgid=100, start_ticks=150, marker="w:abc", table=orphans, proc=proc) == {102, 103, 104}
    # A process older than the launch is never ours; a known (pid, start) is ours anywhere while the process agrees
    # (our marker, or a VLLM:: title where setproctitle overwrote the environment). A state file naming someone
    # else's process (107: no marker, not vLLM; 108: another launch's marker) names nothing.
    old = {102: st(102, 1, 100, ticks=10), 106: st(106, 1, 555), 107: st(107, 1, 107), 108: st(108, 1, 108)}
    proc = _fake_proc(tmp_path / "c", {102: ours, 106: ours, 107: {"PATH": "/bin"}, 108: {"AMDTOP_WORKER": "w:zzz"}})
    known = ((106, 200), (107, 200), (108, 200))
    assert members(pgid=100, start_ticks=150, marker="w:abc", known=known, table=old, proc=proc) == {106}
    assert members(pgid=107, start_ticks=0, marker="w:abc", known=((107, 200),), table=old, proc=proc) == set()


def test_deep_sweep_takes_orphaned_vllm_titles_of_an_unanchored_group(tmp_path: Path) -> None:
    from amdtop.supervisor.procs import ProcStat, members

    def st(pid: int, ppid: int, pgid: int = 100) -> ProcStat:
        return ProcStat(pid, ppid, pgid, pgid, "S", 200, "x")

    # API server and resource tracker are gone; EngineCore (orphan) and its worker keep the group, environ clobbered.
    table = {110: st(110, 1), 111: st(111, 110), 120: st(120, 1), 121: st(121, 120)}
    proc = _fake_proc(tmp_path, {110: {}, 111: {}, 120: {}, 121: {}})
    for pid, argv in ((110, "VLLM::EngineCore"), (111, "VLLM::Worker_TP0"), (120, "python3"), (121, "VLLM::Worker")):
        (proc / str(pid) / "cmdline").write_bytes(argv.encode() + b"\0")
    assert members(pgid=100, start_ticks=150, marker="w:abc", table=table, proc=proc) == set()
    # 121 hangs under a live non-vLLM parent that is not ours: left alone.
    assert members(pgid=100, start_ticks=150, marker="w:abc", table=table, proc=proc, deep=True) == {110, 111}


def test_cli_without_gpu_supervises_cpu_workers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from amdtop.cli.main import main
    from amdtop.errors import NoGpuFound
    from amdtop.runtime.spec import NodeSpec

    def no_gpu(_args: object) -> object:
        raise NoGpuFound("no GPU found")

    monkeypatch.setattr(NodeSpec, "open_backend", no_gpu)
    cfg = tmp_path / "c.toml"
    cfg.write_text(
        '[[worker]]\nname = "cpu"\nmodel = "m"\ngpus = []\nnuma_node = 0\nport = 18032\ncommand = ["sleep"]\n'
    )
    rc = main(["--config", str(cfg), "--state-dir", str(tmp_path / "st"), "workers", "status", "--json"])
    out = capsys.readouterr()
    assert rc == 0 and json.loads(out.out)[0]["state"] == "stopped" and "CPU-only" in out.err
    cfg.write_text(cfg.read_text().replace("gpus = []", "gpus = [0]"))
    assert main(["--config", str(cfg), "--state-dir", str(tmp_path / "st"), "workers", "status"]) == 2
    assert "GPU 0 does not exist (this node has no GPUs)" in capsys.readouterr().err
