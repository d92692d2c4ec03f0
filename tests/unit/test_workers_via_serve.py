"""``amdtop workers`` is a client of the node service: with ``amdtop serve`` running for the state dir, the serve's
supervisor carries a launch out (the worker is the serve's child, gated by the serve); without one, the command's own
supervisor does, the same way. Real processes: the serve, the CLI and the worker are each a process of their own."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest

from tests.unit.test_hostile4 import AMDTOP, _gate_node, _serve
from tests.unit.test_supervisor_hostile import cleanup  # noqa: F401  (the fixture)
from tests.unit.test_supervisor_procs import alive, wait_files


def _ppid(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat[stat.rindex(")") + 2 :].split()[1])


def _amdtop(argv: list[str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(AMDTOP), *argv, "workers", *args], capture_output=True, text=True, timeout=120, check=False,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip


def test_launch_and_stop_with_a_serve_running_are_the_serves(tmp_path: Path, cleanup: list[Path]) -> None:  # noqa: F811
    argv, _cfg, _root = _gate_node(tmp_path)
    state = tmp_path / "state"
    cleanup.append(state)
    serve = _serve(tmp_path, state, *argv)
    try:
        done = _amdtop(argv, "launch", "llama")
        assert done.returncode == 0, done.stderr
        assert "Traceback" not in done.stderr
        (pid,) = wait_files(tmp_path, 1)
        assert _ppid(pid) == serve.pid, "the serve's supervisor did not start the worker"
        status = _amdtop(argv, "status", "--json")
        assert status.returncode == 0 and f'"pid": {pid}' in status.stdout, status.stderr
        stopped = _amdtop(argv, "stop", "llama", "--grace", "0.5")
        assert stopped.returncode == 0, stopped.stderr
        assert not alive({pid})
        assert serve.poll() is None  # the serve goes on
    finally:
        serve.send_signal(signal.SIGTERM)
        serve.wait(timeout=30)


def test_launch_without_a_serve_is_the_commands_own(tmp_path: Path, cleanup: list[Path]) -> None:  # noqa: F811
    argv, _cfg, _root = _gate_node(tmp_path)
    state = tmp_path / "state"
    cleanup.append(state)
    done = _amdtop(argv, "launch", "llama")
    assert done.returncode == 0, done.stderr
    (pid,) = wait_files(tmp_path, 1)
    assert not (state / "serve.sock").exists()
    assert _ppid(pid) != os.getpid()
    status = _amdtop(argv, "status", "--json")
    assert status.returncode == 0 and f'"pid": {pid}' in status.stdout, status.stderr
    stopped = _amdtop(argv, "stop", "llama", "--grace", "0.5")
    assert stopped.returncode == 0, stopped.stderr
    assert not alive({pid})


def test_the_serve_gates_a_launch_it_carries_out(tmp_path: Path, cleanup: list[Path]) -> None:  # noqa: F811
    argv, _cfg, root = _gate_node(tmp_path)
    state = tmp_path / "state"
    cleanup.append(state)
    (root / "devices/pci0000:00/0000:26:00.0/ras").mkdir(parents=True, exist_ok=True)
    (root / "devices/pci0000:00/0000:26:00.0/ras/umc_err_count").write_text("ue: 4\nce: 0\n")
    serve = _serve(tmp_path, state, *argv)
    try:
        refused = _amdtop(argv, "launch", "llama")
        assert refused.returncode == 1
        assert refused.stderr.splitlines()[0] == (
            "amdtop: error: worker[llama]: launch refused (1 reason(s); --force overrides):"
        ), refused.stderr
        assert not list(tmp_path.glob("out.*"))
        forced = _amdtop(argv, "launch", "llama", "--force")
        assert forced.returncode == 0, forced.stderr
        assert "launch gate overridden by --force (recorded): GPU 1: uncorrectable" in forced.stderr
        (pid,) = wait_files(tmp_path, 1)
        assert _ppid(pid) == serve.pid
        _amdtop(argv, "stop", "llama", "--grace", "0.5")
    finally:
        serve.send_signal(signal.SIGTERM)
        serve.wait(timeout=30)


@pytest.mark.parametrize("readonly", [True])
def test_a_read_only_client_is_refused_by_the_serve(tmp_path: Path, cleanup: list[Path], readonly: bool) -> None:  # noqa: F811
    argv, _cfg, _root = _gate_node(tmp_path)
    state = tmp_path / "state"
    cleanup.append(state)
    serve = _serve(tmp_path, state, *argv)
    try:
        done = _amdtop([*argv, "--readonly"], "launch", "llama")
        assert done.returncode == 2
        assert done.stderr.strip() == "amdtop: error: launch: refused: read-only (--readonly); restart without " \
            "--readonly to control workers", done.stderr  # fmt: skip
        assert not list(tmp_path.glob("out.*"))
    finally:
        serve.send_signal(signal.SIGTERM)
        serve.wait(timeout=30)


def test_snapshot_audit_and_export_read_the_serves_frames(tmp_path: Path) -> None:
    """With a serve running, the read commands take its frames: here the command's own node options name a sysfs
    tree that does not exist, which a second poller would fail to open."""
    import json
    import re
    import urllib.request

    state = tmp_path / "state"
    serve = _serve(tmp_path, state, "--backend", "sim", "--seed", "5", "--config", str(tmp_path / "none.toml"))
    wrong = ["--backend", "sysfs", "--sysfs-root", str(tmp_path / "nowhere"), "--state-dir", str(state)]
    exporter: subprocess.Popen[str] | None = None
    try:
        snap = subprocess.run([str(AMDTOP), *wrong, "snapshot", "--json"], capture_output=True, text=True, timeout=120,
                              check=False)  # fmt: skip
        assert snap.returncode == 0, snap.stderr
        doc = json.loads(snap.stdout)
        assert doc["backend"] == "sim" and len(doc["gpus"]) == 8
        audit = subprocess.run([str(AMDTOP), *wrong, "audit", "--json"], capture_output=True, text=True, timeout=120,
                               check=False)  # fmt: skip
        assert audit.returncode == 0, audit.stderr
        assert "findings" in json.loads(audit.stdout)
        exporter = subprocess.Popen(
            [str(AMDTOP), *wrong, "export", "--listen", "127.0.0.1:0"], stderr=subprocess.PIPE, text=True,
            stdout=subprocess.DEVNULL,
        )  # fmt: skip
        assert exporter.stderr is not None
        line = exporter.stderr.readline()
        url = re.search(r"at (http://\S+)", line)
        assert url and f"amdtop serve (pid {serve.pid})" in line, line
        page = urllib.request.urlopen(url.group(1), timeout=30).read().decode()
        assert 'amdtop_gpu_utilization_percent{' in page or "amdtop_gpu" in page
        serve.send_signal(signal.SIGTERM)
        serve.wait(timeout=30)
        assert exporter.wait(timeout=30) == 1  # the serve went away: so does its exporter, saying why
        assert "amdtop serve (pid" in exporter.stderr.read()
    finally:
        for proc in (exporter, serve):
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                proc.wait(timeout=30)
