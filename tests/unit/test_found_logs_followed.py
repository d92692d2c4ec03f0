"""A found server's log where it is no plain file: a container runtime's log file, decoded as it is read, and a
systemd unit's journal, followed through ``journalctl -f -o cat``; both read exactly as a file log is.

Container logs: built here (labelled built) from the runtimes' format definitions (moby
``daemon/logger/jsonfilelog``: ``{"log":...,"stream":...,"time":...}``, a line over the runtime's buffer split into
objects whose ``log`` has no newline until the last; kubernetes ``pkg/kubelet/kuberuntime/logs/logs.go``:
``<RFC3339Nano> <stream> <P|F> <text>``), wrapping the real captured NCCL log of tests/fixtures/nccl/h200x2-2rank
(source in tests/unit/test_h200x2_capture.py) and the real vLLM crash of tests/fixtures/vllm_crash (source in its
first line). The journal: this VM runs no systemd/journald, so ``journalctl`` is a stand-in executable first on
``PATH`` (labelled a stand-in) that prints the captured lines in ``-o cat`` form and keeps running, a real process.
"""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from amdtop.analysis import found_log
from amdtop.analysis.found_log import find_log
from amdtop.logread.rccl.container_log import CRI, DOCKER_JSON, MAX_JOINED, ContainerLogDecoder, log_format
from amdtop.logread.rccl.journal import journal_address, journal_args
from amdtop.logread.rccl.monitor import LogMonitor
from amdtop.logread.rccl.tail import LogFollower
from amdtop.pipeline import NodePipeline
from amdtop.pipeline.found import GONE_KEEP_S, crash_from_log
from amdtop.telemetry.sim import SimBackend
from tests.unit.test_found_servers import Clock, free_port, start_sglang

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
NCCL = FIXTURES / "nccl" / "h200x2-2rank.rank0.log"
CRASH = FIXTURES / "vllm_crash" / "tp2-rank1-sigkill-cpu.log"
TIMEOUT = FIXTURES / "incidents" / "torch_laggard_pytorch_118369.log"
"""Real PyTorch watchdog timeouts (source in its first line): errors, a collective-timeout incident and flags."""


def captured() -> list[str]:
    """The NCCL init capture, then the watchdog timeouts (their source lines left out)."""
    timeout = [line for line in TIMEOUT.read_text().splitlines() if not line.startswith("#")]
    return NCCL.read_text().splitlines() + timeout


CID = "4f1c9a7d2b3e" + "ab" * 26
STAMP = "2026-12-07T04:20:00.123456789Z"


def docker_json(lines: list[str], *, split_every: int = 0) -> str:
    """Built: each line as json-file writes it; with ``split_every``, a line longer than that is written in parts
    (as the runtime splits a line over its buffer), a stderr line written between two parts."""
    out = []
    for line in lines:
        text = line + "\n"
        if split_every and len(text) > split_every:
            parts = [text[i : i + split_every] for i in range(0, len(text), split_every)]
            for k, part in enumerate(parts):
                out.append(json.dumps({"log": part, "stream": "stdout", "time": STAMP}))
                if k == 0:
                    out.append(json.dumps({"log": "stderr between parts\n", "stream": "stderr", "time": STAMP}))
        else:
            out.append(json.dumps({"log": text, "stream": "stdout", "time": STAMP}))
    return "".join(o + "\n" for o in out)


def cri(lines: list[str], *, split_every: int = 0) -> str:
    """Built: each line in the CRI form; with ``split_every``, a longer line as ``P`` parts ending in an ``F``."""
    out = []
    for line in lines:
        parts = [line[i : i + split_every] for i in range(0, len(line), split_every)] if split_every else [line]
        for k, part in enumerate(parts):
            out.append(f"{STAMP} stdout {'F' if k == len(parts) - 1 else 'P'} {part}")
            if k == 0 and len(parts) > 1:
                out.append(f"{STAMP} stderr F stderr between parts")
    return "".join(o + "\n" for o in out)


def docker_path(root: Path) -> Path:
    path = root / CID / f"{CID}-json.log"
    path.parent.mkdir(parents=True)
    return path


def cri_path(root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    return root / f"vllm-0_default_vllm-{CID}.log"


def test_formats_are_known_by_the_runtimes_file_names(tmp_path: Path) -> None:
    assert log_format(docker_path(tmp_path / "docker")) == DOCKER_JSON
    assert log_format(cri_path(tmp_path / "containers")) == CRI
    assert log_format(tmp_path / CID / "userdata" / "ctr.log") == CRI  # podman's k8s-file
    assert log_format(tmp_path / "serve.log") is None
    assert log_format(tmp_path / f"{CID}-json.log") is None  # not in its container's directory


@pytest.mark.parametrize("fmt", [DOCKER_JSON, CRI])
def test_a_container_log_parses_exactly_as_the_plain_file(tmp_path: Path, fmt: str) -> None:
    lines = NCCL.read_text().splitlines()
    plain = tmp_path / "plain.log"
    plain.write_text("\n".join(lines) + "\n")
    if fmt == DOCKER_JSON:
        wrapped = docker_path(tmp_path / "docker")
        wrapped.write_text(docker_json(lines, split_every=40))
    else:
        wrapped = cri_path(tmp_path / "containers")
        wrapped.write_text(cri(lines, split_every=40))
    a, b = LogMonitor([("w", plain)]), LogMonitor([("w", wrapped)])
    try:
        ua, ub = a.poll(), b.poll()
        texts = [line.text for line in ub.lines]
        assert [t for t in texts if t != "stderr between parts"] == [line.text for line in ua.lines]
        assert "stderr between parts" in texts  # the other stream's line, whole, not glued into the split one
        assert ua.summary and ub.summary == ua.summary  # the same communicators and transports
        # followed as it grows, a record written in two writes (the tail holds the first half)
        record = docker_json([lines[0]]) if fmt == DOCKER_JSON else cri([lines[0]])
        with open(wrapped, "a") as fh:
            fh.write(record[:10])
            fh.flush()
            assert not b.poll().lines
            fh.write(record[10:])
        assert [line.text for line in b.poll().lines] == [lines[0]]
    finally:
        a.close()
        b.close()


def test_decoder_bounds_and_keeps_what_is_not_its_format() -> None:
    d = ContainerLogDecoder(DOCKER_JSON)
    part = json.dumps({"log": "x" * (MAX_JOINED // 2), "stream": "stdout", "time": STAMP})
    assert d.feed([part]) == []  # a part waits for the rest of its line
    out = d.feed([part, part])  # a line that never ends is handed on cut at the bound, not held
    assert len(out) == 1 and len(out[0]) == MAX_JOINED
    assert d.feed(['{"log":"cut off by the tail', "plain text"]) == ['{"log":"cut off by the tail', "plain text"]
    assert d.feed([json.dumps({"log": "a\x1b[31mred\r\n", "stream": "stderr"})]) == ["a?[31mred"]
    assert d.feed(['{"log":"x\\n"}, {"log":"y\\n"}', '{"log":"z\\n"}']) == ['{"log":"x\\n"}, {"log":"y\\n"}', "z"]
    c = ContainerLogDecoder(CRI)
    assert c.feed([f"{STAMP} stdout P one ", f"{STAMP} stdout F two"]) == ["one two"]
    assert c.feed([f"{STAMP} stdout F", "not cri"]) == ["", "not cri"]


def test_a_crash_is_named_from_a_container_log(tmp_path: Path) -> None:
    lines = CRASH.read_text().splitlines()
    plain = tmp_path / "plain.log"
    plain.write_text("\n".join(lines) + "\n")
    wrapped = docker_path(tmp_path / "docker")
    wrapped.write_text(docker_json(lines))
    assert crash_from_log(str(wrapped), [(0, 11), (1, 12)]) == crash_from_log(str(plain), [(0, 11), (1, 12)])
    _lines, error, health = crash_from_log(str(wrapped), [(0, 11), (1, 12)])
    assert health is not None and health.rank == 1 and error is not None and "VllmWorker-1" in error


@pytest.fixture
def server(tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    """The SGLang stand-in of test_found_servers, its stdout a socket (as a unit's is: journald's stream socket, or
    a container runtime's pipe reader)."""
    ours, theirs = socket.socketpair()
    proc = start_sglang(free_port(), theirs.fileno())  # type: ignore[arg-type]
    theirs.close()
    yield proc
    if proc.poll() is None:
        os.killpg(proc.pid, 15)
        proc.wait(10)
    ours.close()


def _tick_until(pipeline: NodePipeline, clock: Clock, name: str, ok: object, timeout: float = 30.0) -> object:
    deadline = time.monotonic() + timeout
    frame = None
    while time.monotonic() < deadline:
        clock.now += 31.0
        frame = pipeline.tick()
        if callable(ok) and ok(frame):
            return frame
        time.sleep(0.2)
    w = frame.worker(name) if frame is not None else None
    raise AssertionError(f"not seen in time: {w}")


def _cgroup_of(pid: int, text: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """This VM has no systemd and no container runtime: the server's cgroup reads as the runtime's would (the
    formats of test_found_servers' cgroup cases); everything else about the process is its real self."""
    real = found_log._cgroup
    monkeypatch.setattr(found_log, "_cgroup", lambda p, proc: text if p == pid else real(p, proc))


def test_a_docker_servers_log_reaches_the_frame(
    tmp_path: Path, server: subprocess.Popen[bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(found_log, "DOCKER_ROOT", tmp_path / "docker")
    path = docker_path(tmp_path / "docker")
    path.write_text(docker_json(captured(), split_every=100))
    _cgroup_of(server.pid, f"0::/system.slice/docker-{CID}.scope\n", monkeypatch)
    name = f"sglang-{server.pid}"
    clock = Clock()
    pipeline = NodePipeline(SimBackend(), clock=clock, follow_logs=True)
    try:
        frame = _tick_until(pipeline, clock, name, lambda f: f.logs is not None and f.logs.worker(name) is not None)
        w = frame.worker(name)  # type: ignore[attr-defined]
        assert w.log is None and w.other_logs == (str(path),)
        assert w.log_note == f"in container {CID[:12]}: following its runtime's log {path} (docker json-file)"
        view = frame.logs.worker(name)  # type: ignore[attr-defined]
        assert view.comms and view.errors >= 1 and view.incidents  # transports, errors, the timeout incident
        assert any(f.worker == name and f.kind.value == "nccl_timeout" for f in frame.flags)  # type: ignore[attr-defined]
        # the Logs pane's lines: the container's own text, decoded (no JSON), the split long lines whole
        texts = [line.text for line in frame.logs.lines if line.worker == name]  # type: ignore[attr-defined]
        assert "vm:658:658 [0] NCCL INFO Bootstrap: Using eth0:192.0.2.2<0>" in texts
        assert not any(t.startswith("{") for t in texts) and captured()[-1] in texts
    finally:
        pipeline.close()


STAND_IN = """#!{python}
# A stand-in for journalctl (this VM runs no journald): "-o cat" output of the lines in {lines}, then it keeps
# running as journalctl -f does; without -f it prints the last -n lines (none with STAND_IN_EMPTY), or fails with
# STAND_IN_FAIL set.
import os, sys, time
open({record!r}, "a").write(" ".join(sys.argv[1:]) + "\\n")
if os.environ.get("STAND_IN_FAIL"):
    sys.stderr.write("Failed to open journal: Permission denied\\n")
    sys.exit(1)
if "-f" not in sys.argv:  # a check: "-n 0" prints nothing, "-n N" the last N lines (none with STAND_IN_EMPTY)
    n = int(sys.argv[sys.argv.index("-n") + 1])
    if n and not os.environ.get("STAND_IN_EMPTY"):
        sys.stdout.write("".join(open({lines!r}).readlines()[-n:]))
    sys.exit(0)
with open({pidfile!r}, "a") as fh:
    fh.write(f"{{os.getpid()}}\\n")
sys.stdout.write(open({lines!r}).read())
sys.stdout.flush()
while True:
    time.sleep(1)
"""


def _stand_in(tmp_path: Path, lines: Path) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    exe = bin_dir / "journalctl"
    exe.write_text(
        STAND_IN.format(
            python=sys.executable, lines=str(lines), record=str(tmp_path / "args"), pidfile=str(tmp_path / "pids")
        )
    )
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return bin_dir


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_a_units_journal_is_followed_into_the_frame_and_journalctl_reaped(
    tmp_path: Path, server: subprocess.Popen[bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    journal = tmp_path / "journal.txt"
    journal.write_text("\n".join(captured()) + "\n")
    monkeypatch.setenv("PATH", f"{_stand_in(tmp_path, journal)}{os.pathsep}{os.environ['PATH']}")
    _cgroup_of(server.pid, "0::/system.slice/vllm-llama.service\n", monkeypatch)
    name = f"sglang-{server.pid}"
    clock = Clock()
    pipeline = NodePipeline(SimBackend(), clock=clock, follow_logs=True)
    try:
        frame = _tick_until(
            pipeline, clock, name, lambda f: f.logs is not None and (v := f.logs.worker(name)) and v.comms
        )
        w = frame.worker(name)  # type: ignore[attr-defined]
        assert w.log_note == (
            "its output goes to the journal of vllm-llama.service: following journalctl _SYSTEMD_UNIT=vllm-llama.service"
        )
        (address,) = w.other_logs
        assert address.startswith("journalctl: _SYSTEMD_UNIT=vllm-llama.service --since=@")
        frame = _tick_until(pipeline, clock, name, lambda f: f.logs.worker(name).incidents)
        view = frame.logs.worker(name)  # type: ignore[attr-defined]
        assert view.comms and view.errors >= 1  # transports and the watchdog's errors, read from the journal
        assert any(f.worker == name and f.kind.value == "nccl_timeout" for f in frame.flags)  # type: ignore[attr-defined]
        args = (tmp_path / "args").read_text().splitlines()
        assert any(
            a.startswith("-f -n 5000 -o cat --no-pager -q _SYSTEMD_UNIT=vllm-llama.service --since=@") for a in args
        )
        (pid,) = [int(p) for p in (tmp_path / "pids").read_text().split()]
        assert _alive(pid)
        os.killpg(server.pid, 15)
        server.wait(10)
        time.sleep(0.3)
        clock.now += 2.0
        pipeline.tick()  # ended: still shown (and its journal followed) for GONE_KEEP_S
        assert _alive(pid)
        clock.now += GONE_KEEP_S + 1
        assert pipeline.tick().worker(name) is None
        pipeline.tick()  # the log sources are those of the last frame's workers: the journal is no longer one
        assert not _alive(pid)  # journalctl stopped and reaped (no zombie left)
    finally:
        pipeline.close()


def test_journalctl_missing_or_failing_is_said_in_one_line(
    tmp_path: Path, server: subprocess.Popen[bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    _cgroup_of(server.pid, "0::/system.slice/vllm-llama.service\n", monkeypatch)
    name = f"sglang-{server.pid}"
    monkeypatch.setenv("PATH", str(tmp_path / "nothing-here"))
    clock = Clock()
    pipeline = NodePipeline(SimBackend(), clock=clock, follow_logs=True)
    try:
        frame = _tick_until(pipeline, clock, name, lambda f: f.worker(name) is not None and f.worker(name).log_note)
        w = frame.worker(name)  # type: ignore[attr-defined]
        assert w.log_note == (
            "its output goes to the journal of vllm-llama.service, which cannot be followed: journalctl is not on PATH"
        )
        assert w.other_logs == ()
    finally:
        pipeline.close()
    monkeypatch.setenv("PATH", f"{_stand_in(tmp_path, tmp_path / 'none')}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("STAND_IN_FAIL", "1")
    clock = Clock()
    pipeline = NodePipeline(SimBackend(), clock=clock, follow_logs=True)
    try:
        frame = _tick_until(pipeline, clock, name, lambda f: f.worker(name) is not None and f.worker(name).log_note)
        assert frame.worker(name).log_note == (  # type: ignore[attr-defined]
            "its output goes to the journal of vllm-llama.service, which cannot be followed: journalctl exited with "
            "status 1: Failed to open journal: Permission denied"
        )
    finally:
        pipeline.close()


def test_a_journal_address_takes_only_matches_and_a_time() -> None:
    address = journal_address(["_SYSTEMD_UNIT=vllm.service"], 1733540000.7)
    assert address == "journalctl: _SYSTEMD_UNIT=vllm.service --since=@1733540000"
    assert journal_args(address)[-2:] == ["_SYSTEMD_UNIT=vllm.service", "--since=@1733540000"]
    for bad in (["--output=json"], ["_SYSTEMD_UNIT=a;b"], []):
        with pytest.raises(ValueError):
            journal_address(bad)
    with pytest.raises(ValueError):
        journal_args("journalctl: _PID=1 --file=/etc/shadow")


def test_a_journal_that_exits_is_not_started_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    exe = bin_dir / "journalctl"
    exe.write_text(f"#!{sys.executable}\nimport sys\nopen({str(tmp_path / 'runs')!r}, 'a').write('x')\nsys.exit(1)\n")
    exe.chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))
    follower = LogFollower([("w", journal_address(["_PID=1"]))])
    try:
        for _ in range(5):
            assert not follower.poll().lines
            time.sleep(0.2)
        assert (tmp_path / "runs").read_text() == "x"
    finally:
        follower.close()


def test_find_log_follows_a_containers_runtime_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(found_log, "DOCKER_ROOT", tmp_path / "docker")
    path = docker_path(tmp_path / "docker")
    path.write_text("")
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], stdout=subprocess.PIPE)
    try:
        _cgroup_of(proc.pid, f"0::/system.slice/docker-{CID}.scope\n", monkeypatch)
        found = find_log(proc.pid)
        assert found.follow == (str(path),) and found.container == CID and found.path is None
    finally:
        proc.kill()
        proc.wait()


def test_a_container_without_a_log_file_is_followed_in_the_journal_its_driver_writes(
    tmp_path: Path, server: subprocess.Popen[bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Docker's and podman's journald log driver: no file under the runtime's root, each line in the journal with the
    # container's full id in CONTAINER_ID_FULL (docs.docker.com/engine/logging/drivers/journald)
    monkeypatch.setattr(found_log, "DOCKER_ROOT", tmp_path / "docker")
    monkeypatch.setattr(found_log, "PODMAN_ROOT", tmp_path / "podman")
    monkeypatch.setattr(found_log, "CRI_ROOT", tmp_path / "cri")
    journal = tmp_path / "journal.txt"
    journal.write_text("\n".join(captured()) + "\n")
    monkeypatch.setenv("PATH", f"{_stand_in(tmp_path, journal)}{os.pathsep}{os.environ['PATH']}")
    _cgroup_of(server.pid, f"0::/system.slice/docker-{CID}.scope\n", monkeypatch)
    name = f"sglang-{server.pid}"
    clock = Clock()
    pipeline = NodePipeline(SimBackend(), clock=clock, follow_logs=True)
    try:
        frame = _tick_until(
            pipeline, clock, name, lambda f: f.logs is not None and (v := f.logs.worker(name)) and v.incidents
        )
        w = frame.worker(name)  # type: ignore[attr-defined]
        assert w.log_note == (
            f"in container {CID[:12]}: no runtime log file for it is readable: following its journal entries "
            f"(journalctl CONTAINER_ID_FULL={CID[:12]}...)"
        )
        assert w.other_logs[0].startswith(f"journalctl: CONTAINER_ID_FULL={CID} --since=@")
        assert frame.logs.worker(name).comms  # type: ignore[attr-defined]
    finally:
        pipeline.close()
    monkeypatch.setenv("STAND_IN_EMPTY", "1")  # another log driver (local, syslog...): the journal holds none
    clock = Clock()
    pipeline = NodePipeline(SimBackend(), clock=clock, follow_logs=True)
    try:
        frame = _tick_until(pipeline, clock, name, lambda f: f.worker(name) is not None and f.worker(name).log_note)
        w = frame.worker(name)  # type: ignore[attr-defined]
        assert w.log_note == (
            f"in container {CID[:12]}: no runtime log file for it is readable, and its journal cannot be followed: "
            f"the journal holds none of its lines (docker logs {CID[:12]} may show it)"
        )
        assert w.other_logs == ()
    finally:
        pipeline.close()
