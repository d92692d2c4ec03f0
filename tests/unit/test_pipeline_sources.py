"""Where the exporter's optional facts come from (ramp results, probe cache) and the ``export`` command's errors."""

from __future__ import annotations

import json
import os
import shutil
import socket
from pathlib import Path

import pytest

from amdtop.cli.main import main
from amdtop.model import Flag, FlagKind, WorkerState, WorkerStatus
from amdtop.pipeline import LinkBandwidth, NodePipeline
from amdtop.pipeline.statefiles import load_probe, load_ramp_knees
from amdtop.telemetry.sim import SimBackend


def write_ramp(folder: Path, name: str, doc: dict[str, object], mtime: float) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.json"
    path.write_text(json.dumps(doc))
    os.utime(path, (mtime, mtime))


def test_ramp_knees_newest_per_worker(tmp_path: Path) -> None:
    ramp = tmp_path / "ramp"
    base = {"model": "m", "steps": []}
    a_url = {"url": "http://127.0.0.1:19497"}
    write_ramp(ramp, "old", {**base, **a_url, "knee": {"concurrency": 16, "reason": "x"}}, 1000.0)
    write_ramp(ramp, "new", {**base, **a_url, "knee": {"concurrency": 32}, "recommended_max_num_seqs": 32}, 2000.0)
    write_ramp(ramp, "named", {**base, "url": "http://h:1", "worker": "llama-b", "knee": {"concurrency": 8}}, 1500.0)
    write_ramp(ramp, "stray", {**base, "url": "http://10.0.0.9:8000", "knee": {"concurrency": 4}}, 1500.0)
    write_ramp(ramp, "noknee", {**base, **a_url, "knee": None}, 3000.0)
    (ramp / "broken.json").write_text("{")
    workers = [WorkerStatus("llama-a", WorkerState.READY, (0, 1), port=19497, url="http://127.0.0.1:19497")]
    knees = load_ramp_knees(tmp_path, workers)
    assert [(k.worker, k.concurrency, k.recommended_max_num_seqs) for k in knees] == [
        ("http://10.0.0.9:8000", 4, None),
        ("llama-a", 32, 32),
        ("llama-b", 8, None),
    ]
    assert knees[1].timestamp == 2000.0


def test_ramp_knee_from_the_ramp_saver(tmp_path: Path) -> None:
    results = pytest.importorskip("amdtop.ramp.results")
    knee_mod = pytest.importorskip("amdtop.ramp.knee")
    res = results.RampResult("http://127.0.0.1:19496", "m", {}, knee=knee_mod.Knee(24, "throughput flat"))
    results.save(res, tmp_path)
    workers = [WorkerStatus("llama-c", WorkerState.READY, (0,), port=19496)]
    knees = load_ramp_knees(tmp_path, workers)
    assert [(k.worker, k.concurrency, k.recommended_max_num_seqs) for k in knees] == [("llama-c", 24, 24)]


def test_probe_cache_to_bandwidth(tmp_path: Path) -> None:
    model = pytest.importorskip("amdtop.probe.model")
    cache = pytest.importorskip("amdtop.probe.cache")
    copies = (model.CopyResult(0, 1, 10**9, 0.02), model.CopyResult(1, 0, 10**9, 0.025))
    flag = Flag(FlagKind.LINK_DEGRADED, "0-1 slow", gpus=(0, 1))
    cache.save_results(tmp_path, model.ProbeResults(1.0, "h", (0, 1, 2), copies, flags=(flag,)))
    bandwidth, flags = load_probe(tmp_path)
    assert bandwidth == (LinkBandwidth(0, 1, 40.0),)  # slower direction: 1e9 B / 0.025 s
    assert [f.kind for f in flags] == [FlagKind.LINK_DEGRADED]
    assert load_probe(tmp_path / "none") == ((), ())


def test_ramp_knees_absent_dir(tmp_path: Path) -> None:
    assert load_ramp_knees(tmp_path / "nothing") == ()


def test_pipeline_polls_backend_once_per_tick(tmp_path: Path) -> None:
    sim = SimBackend()
    pipeline = NodePipeline(sim, state_dir=tmp_path, proc_root=tmp_path)
    a, b = pipeline.tick(), pipeline.tick()
    assert a.snapshot.gpus and b.snapshot.timestamp >= a.snapshot.timestamp and (a.tick, b.tick) == (1, 2)


def isolated(tmp: Path) -> list[str]:
    return ["--config", str(tmp / "workers.toml"), "--state-dir", str(tmp / "state")]


def test_cli_bad_listen_exits_2(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["export", "--demo", "--listen", "nohostport", *isolated(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("amdtop: error: --listen:")


def test_cli_port_in_use_exits_1(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 19414))
        sock.listen(1)
        assert main(["export", "--demo", "--listen", "127.0.0.1:19414", *isolated(tmp_path)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["amdtop: error: --listen: 127.0.0.1:19414 is already in use; pick another port with --listen"]


def test_rccl_counts_from_worker_logs(tmp_path: Path) -> None:
    pytest.importorskip("amdtop.logread.rccl.parser")
    log = tmp_path / "llama-a.log"
    shutil.copy(Path(__file__).resolve().parents[1] / "fixtures" / "rccl" / "amd_examples.log", log)
    clean = tmp_path / "llama-b.log"
    clean.write_text("INFO: Started server process [1]\n")
    workers = [
        WorkerStatus("llama-a", WorkerState.CRASHED, (0, 1, 2, 3), log=str(log)),
        WorkerStatus("llama-b", WorkerState.READY, (4, 5), log=str(clean)),
        WorkerStatus("llama-c", WorkerState.STOPPED, (6,), log=str(tmp_path / "missing.log")),
    ]


    class Source:
        def status(self) -> list[WorkerStatus]:
            return workers

    # The log monitor parses each log once, as it grows; the frame carries its counts to every view.
    pipeline = NodePipeline(SimBackend(), Source(), discover=False, follow_logs=True)
    pipeline.tick()
    frame = pipeline.tick()
    assert {(r.worker, r.errors, r.warnings) for r in frame.log_counts} == {("llama-a", 4, 4), ("llama-b", 0, 0)}
    assert [f for f in frame.flags if f.worker == "llama-a"]  # the diagnosis flags the errors, on the worker
    with clean.open("a") as fh:
        fh.write("NCCL Error 2: unhandled system error\nRuntimeError: NCCL Error 2: unhandled system error\n")
    again = pipeline.tick()
    assert {r.worker: r.errors for r in again.log_counts}["llama-b"] >= 1  # a growing log is parsed as it grows
