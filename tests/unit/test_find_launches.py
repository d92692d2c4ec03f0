"""Finding lost launches by their environment marker reads one environment per foreign session, not per process."""

from __future__ import annotations

from pathlib import Path

import pytest

from amdtop.supervisor import procs
from amdtop.supervisor.launchspec import MARKER_ENV, STATE_ENV


def _proc(root: Path, pid: int, sid: int, start: int, env: dict[str, str] | None, comm: str = "python3") -> None:
    d = root / str(pid)
    d.mkdir()
    # pid (comm) state ppid pgrp session ... starttime is field 22
    rest = ["S", "1", str(sid), str(sid)] + ["0"] * 15 + [str(start)] + ["0"] * 10
    (d / "stat").write_text(f"{pid} ({comm}) " + " ".join(rest) + "\n")
    if env is None:
        (d / "environ").write_bytes(b"VLLM::Worker_TP0\0\0\0")  # what setproctitle leaves
    else:
        (d / "environ").write_bytes(b"".join(f"{k}={v}".encode() + b"\0" for k, v in env.items()))


def test_one_environ_per_foreign_session_and_lost_launches_found(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    proc, state = tmp_path / "proc", tmp_path / "state"
    proc.mkdir()
    want = str(procs.state_dir_key(state))
    ours = {MARKER_ENV: "llama:abc", STATE_ENV: want, "PATH": "/usr/bin"}
    # A login session with 300 unrelated processes.
    _proc(proc, 100, 100, 10, {"PATH": "/usr/bin", "HOME": "/root"}, "bash")
    for pid in range(101, 401):
        _proc(proc, pid, 100, 11, {"PATH": "/usr/bin"}, "sleep")
    # Our launch: the leader's environment was emptied by setproctitle; a child still carries the marker.
    _proc(proc, 500, 500, 20, None, "VLLM::APIServer")
    _proc(proc, 501, 500, 21, ours)
    _proc(proc, 502, 500, 22, None, "VLLM::Worker_TP0")
    # A crashed launch: the leader is gone, its members keep the session id.
    _proc(proc, 601, 600, 31, {MARKER_ENV: "qwen:def", STATE_ENV: want})
    # Another amdtop's launch (another state dir) is never taken.
    _proc(proc, 700, 700, 40, {MARKER_ENV: "llama:zzz", STATE_ENV: "/elsewhere"})
    reads: list[int] = []
    real = procs.read_environ

    def counting(pid: int, root: Path = proc) -> dict[str, str]:
        reads.append(pid)
        return real(pid, root)

    opened: list[tuple[int, str]] = []
    real_bytes = procs.read_proc_bytes

    def counting_bytes(pid: int, name: str, root: Path = proc) -> bytes:
        opened.append((pid, name))
        return real_bytes(pid, name, root)

    # Markers are evidence only for launches this state dir's log knows (issue 23); a forged one is left out.
    (state / "logs").mkdir(parents=True)
    for marker in ("llama:abc", "qwen:def"):
        name = marker.split(":")[0]
        (state / "logs" / f"{name}.log").write_text(f"=== amdtop launch {marker} at 2026-01-01 00:00:00: vllm serve\n")
    _proc(proc, 800, 800, 50, {MARKER_ENV: "mistral:forged", STATE_ENV: want})
    monkeypatch.setattr(procs, "read_environ", counting)
    monkeypatch.setattr(procs, "read_proc_bytes", counting_bytes)
    table = procs.scan(proc)
    notes: list[str] = []
    found = procs.find_launches(state, table, proc, notes=notes)
    assert sorted(found) == ["llama", "qwen"]
    assert len(notes) == 1 and "ignored process(es) 800" in notes[0]
    assert found["llama"].launch_id == "abc" and found["llama"].marked == (501,)
    assert found["qwen"].pid == 601
    # The 301-process login session cost one environ read; the titled leader's empty environment did not decide.
    environ_opens = [pid for pid, name in opened if name == "environ"]
    assert sum(1 for pid in environ_opens if pid in range(100, 401)) == 1
    assert not any(pid in range(100, 401) for pid in reads)
