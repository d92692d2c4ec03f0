"""The command line with kernel faults and without GPUs: ``snapshot --json --kernel-log``, bad kernel logs,
``--backend none`` for snapshot, export and workers status, and ``auto``'s error on a host without GPUs.
Each runs ``python -m amdtop`` as a real process."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.fixtures.sysfs_tree import build_mi300x_8

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "kernel"


def amdtop(tmp_path: Path, *args: str, user: tuple[int, int] | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AMDTOP_FAKE")}
    env["XDG_STATE_HOME"] = str(tmp_path / "state")
    env["XDG_CONFIG_HOME"] = str(tmp_path / "config")
    argv = [sys.executable, "-m", "amdtop", *args]
    if user is not None:
        argv = ["setpriv", f"--reuid={user[0]}", f"--regid={user[1]}", "--clear-groups", *argv]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env, cwd=Path(__file__).parents[2])


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    return build_mi300x_8(tmp_path_factory.mktemp("mi300x"))


def gpu_faults(doc: dict) -> list[dict]:  # type: ignore[type-arg]
    return [f for f in doc["flags"] if f["kind"] == "gpu_fault"]


def test_snapshot_reports_the_faults_a_kernel_log_file_holds(tree, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    log = FIXTURES / "amdgpu_page_fault_split_rocm_amdgpu_172.log"
    out = amdtop(
        tmp_path, "snapshot", "--json", "--backend", "sysfs", "--sysfs-root", str(tree.root), "--kernel-log", str(log)
    )
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    (fault,) = gpu_faults(doc)
    assert {k: fault[k] for k in ("gpu", "bdf", "cause", "pid", "process", "pasid", "count", "suspect")} == {
        "gpu": 6,
        "bdf": "0000:c6:00.0",
        "cause": "page_fault",
        "pid": 12924,
        "process": "pt_main_thread",
        "pasid": 32769,
        "count": 2,
        "suspect": "application",
    }
    assert fault["gpus"] == [6] and fault["worker"] is None and fault["rank"] is None
    assert fault["line"].endswith("no-retry page fault (src_id:0 ring:24 vmid:3 pasid:32769)")
    assert doc["kernel_log"] == {"source": str(log), "available": True, "note": None, "lines": 16}
    assert out.stderr == ""


def test_snapshot_text_lists_the_fault(tree, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    log = FIXTURES / "amdgpu_uncorrectable_reset_mi50_rocm_1886.log"
    out = amdtop(tmp_path, "snapshot", "--backend", "none", "--kernel-log", str(log))
    assert out.returncode == 0, out.stderr
    assert (
        "! gpu_fault: a GPU not in this node's list (0000:e3:00.0): uncorrectable error: a hardware error" in out.stdout
    )
    assert "! gpu_fault: a GPU not in this node's list (0000:e3:00.0): GPU reset" in out.stdout


def test_bad_kernel_logs_say_one_line_and_the_rest_runs(tmp_path: Path) -> None:
    for bad, why in ((tmp_path / "missing.log", "no such file or directory"), (tmp_path, "is a directory")):
        out = amdtop(tmp_path, "snapshot", "--json", "--backend", "none", "--kernel-log", str(bad))
        assert out.returncode == 0, out.stderr
        assert out.stderr.splitlines() == [
            f"amdtop: warning: kernel log unavailable (--kernel-log: {bad}: {why}): GPU faults are not watched"
        ]
        doc = json.loads(out.stdout)
        assert doc["backend"] == "none" and gpu_faults(doc) == []
        assert doc["kernel_log"]["available"] is False and why in doc["kernel_log"]["note"]


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root to drop to nobody")
def test_a_root_only_kernel_log_read_as_nobody() -> None:
    nobody = pwd.getpwnam("nobody")
    base = Path(tempfile.mkdtemp(prefix="amdtop-kfault-"))  # pytest's tmp dirs are root-only all the way up
    try:
        base.chmod(0o755)
        for sub in ("state", "config"):
            (base / sub).mkdir()
            os.chown(base / sub, nobody.pw_uid, nobody.pw_gid)
        secret = base / "root-only.log"
        secret.write_text((FIXTURES / "nvidia_xid31_chia_301.log").read_text())
        secret.chmod(0o600)
        out = amdtop(
            base,
            "snapshot",
            "--json",
            "--backend",
            "none",
            "--kernel-log",
            str(secret),
            user=(nobody.pw_uid, nobody.pw_gid),
        )
    finally:
        shutil.rmtree(base)
    if "Permission denied" in out.stderr and "python" in out.stderr:
        pytest.skip(f"nobody cannot run this checkout's python: {out.stderr.strip()}")
    assert out.returncode == 0, out.stderr
    assert out.stderr.splitlines() == [
        f"amdtop: warning: kernel log unavailable (--kernel-log: {secret}: permission denied): GPU faults are not watched"
    ]
    assert gpu_faults(json.loads(out.stdout)) == []


def test_workers_status_with_backend_none(tmp_path: Path) -> None:
    out = amdtop(tmp_path, "workers", "status", "--json", "--backend", "none")
    assert (out.returncode, json.loads(out.stdout)) == (0, []), out.stderr


def test_auto_without_gpus_names_demo_and_backend_none(tmp_path: Path) -> None:
    empty = tmp_path / "sys"
    (empty / "class" / "drm").mkdir(parents=True)
    out = amdtop(tmp_path, "snapshot", "--sysfs-root", str(empty))
    if out.returncode == 0:
        pytest.skip("a GPU backend answered on this host")
    assert out.returncode == 1
    (line,) = out.stderr.splitlines()
    assert line.startswith("amdtop: error: no GPU found (")
    assert line.endswith(
        "run with --demo for a simulated 8x MI300X node, or --backend none to run without GPU telemetry"
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_export_with_backend_none_serves_the_faults(tmp_path: Path) -> None:
    port = _free_port()
    log = FIXTURES / "nvidia_xid_gpud_46.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("AMDTOP_FAKE")}
    env["XDG_STATE_HOME"] = str(tmp_path / "state")
    env["XDG_CONFIG_HOME"] = str(tmp_path / "config")
    argv = [sys.executable, "-m", "amdtop", "export", "--backend", "none", "--kernel-log", str(log)]
    proc = subprocess.Popen([*argv, "--listen", f"127.0.0.1:{port}"], env=env, stderr=subprocess.PIPE, text=True)
    try:
        body = ""
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                    body = r.read().decode()
                break
            except OSError:
                time.sleep(0.2)
        assert body, "exporter never answered"
        flags = {
            s.labels["kind"]: s.value
            for fam in text_string_to_metric_families(body)
            if fam.name == "amdtop_flags"
            for s in fam.samples
        }
        assert flags["gpu_fault"] == 2  # Xid 13 twice is one fault counted twice; Xid 109 is another
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert "serving none metrics" in err


def test_every_command_runs_with_backend_none(tmp_path: Path) -> None:
    topo = amdtop(tmp_path, "topo", "--json", "--backend", "none")
    assert topo.returncode == 0, topo.stderr
    assert json.loads(topo.stdout)["gpus"] == []
    rccl = Path(__file__).resolve().parents[1] / "fixtures" / "rccl"
    log = next(p for p in sorted(rccl.rglob("*.log")))
    logs = amdtop(tmp_path, "logs", "parse", str(log), "--json", "--topo", "--backend", "none")
    assert logs.returncode == 0, logs.stderr
    probe = amdtop(tmp_path, "probe", "--backend", "none")
    assert probe.returncode == 2
    assert probe.stderr.splitlines() == [
        "amdtop: error: probe: backend none lists no GPU to measure; pick a GPU backend with --backend"
    ]


def test_cpu_worker_on_backend_none_in_snapshot_with_its_fault(tmp_path: Path) -> None:
    """A real CPU worker (the simulated OpenAI server) launched, seen by ``snapshot``, and named by a kernel fault."""
    port = _free_port()
    cfg = tmp_path / "c.toml"
    cfg.write_text(
        f'[[worker]]\nname = "cpu-sim"\nmodel = "tiny"\ngpus = []\nnuma_node = "none"\nport = {port}\n'
        f'command = ["{sys.executable}", "-m", "amdtop.simserver"]\n'
    )
    common = ("--config", str(cfg), "--state-dir", str(tmp_path / "st"), "--backend", "none")
    launch = amdtop(tmp_path, *common, "workers", "launch", "cpu-sim", "--wait", "--timeout", "60")
    assert launch.returncode == 0, launch.stderr
    try:
        status = amdtop(tmp_path, *common, "workers", "status", "--json")
        (w,) = json.loads(status.stdout)
        assert w["state"] == "ready" and w["gpus"] == []
        # Built from the real Xid 31 line of tests/fixtures/kernel/nvidia_xid31_chia_301.log, with the worker's pid.
        real = (FIXTURES / "nvidia_xid31_chia_301.log").read_text().splitlines()[2]
        log = tmp_path / "kern.log"
        log.write_text(real.replace("pid=13332, name=cuda_plot_k32_v", f"pid={w['pid']}, name=python3") + "\n")
        snap = amdtop(tmp_path, *common, "snapshot", "--json", "--kernel-log", str(log))
        assert snap.returncode == 0, snap.stderr
        doc = json.loads(snap.stdout)
        # Other vLLM servers on this host are discovered too (the shared test machine runs some): look at ours.
        assert next(x for x in doc["workers"] if x["name"] == "cpu-sim")["state"] == "ready"
        (fault,) = gpu_faults(doc)
        assert (fault["worker"], fault["pid"], fault["cause"], fault["gpu"]) == (
            "cpu-sim",
            w["pid"],
            "page_fault",
            None,
        )
    finally:
        stop = amdtop(tmp_path, *common, "workers", "stop", "cpu-sim", "--grace", "10")
    assert stop.returncode == 0, stop.stderr
