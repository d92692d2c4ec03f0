"""``amdtop workers stacks``: real py-spy against real Python processes, and its failures (py-spy missing, ptrace
denied by the kernel, a process that exits before or while it is dumped): one line each, nothing killed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from amdtop.cli.main import main
from amdtop.errors import AmdtopError
from amdtop.supervisor import stacks
from amdtop.supervisor.procs import read_stat
from amdtop.supervisor.stacks import dump_one, dump_stacks, find_py_spy, render_stacks, require_py_spy

PY_SPY = find_py_spy()
needs_py_spy = pytest.mark.skipif(PY_SPY is None, reason="py-spy is not installed (pip install -e '.[dev]')")
SCRIPT = "import time\ndef waiting_in_collective():\n    time.sleep(300)\nwaiting_in_collective()\n"


@pytest.fixture
def python_rank() -> Iterator[subprocess.Popen[bytes]]:
    """A real Python process standing in for a rank, blocked in a function whose name the dump must show."""
    proc = subprocess.Popen([sys.executable, "-c", SCRIPT])
    deadline = time.monotonic() + 10
    while (st := read_stat(proc.pid)) is not None and st.state != "S" and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(0.2)  # past the interpreter's start-up, into the sleep
    try:
        yield proc
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGCONT)
            proc.kill()
        proc.wait()


@needs_py_spy
def test_dump_shows_the_function_a_rank_waits_in(python_rank: subprocess.Popen[bytes]) -> None:
    (got,) = dump_stacks([(1, python_rank.pid)])
    assert got.error is None and got.text is not None
    assert "waiting_in_collective" in got.text
    text = render_stacks("llama", [got])
    assert text.startswith(f"=== llama rank 1 (pid {python_rank.pid})\n")
    assert python_rank.poll() is None


@needs_py_spy
def test_a_stopped_rank_is_read_without_pausing_and_stays_stopped(python_rank: subprocess.Popen[bytes]) -> None:
    os.kill(python_rank.pid, signal.SIGSTOP)
    deadline = time.monotonic() + 5
    while (st := read_stat(python_rank.pid)) is not None and st.state != "T" and time.monotonic() < deadline:
        time.sleep(0.01)
    got = dump_one(1, python_rank.pid, py_spy=str(PY_SPY))
    assert got.error is None and got.text is not None and "waiting_in_collective" in got.text
    st = read_stat(python_rank.pid)
    assert st is not None and st.state == "T"  # left as it was: stopping or resuming it is the operator's call


def test_py_spy_missing_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                    capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    with pytest.raises(AmdtopError, match=r"py-spy is not installed; install it with pip install 'amdtop\[debug\]'"):
        require_py_spy(str(tmp_path / "no-py-spy"))
    monkeypatch.setattr(stacks, "find_py_spy", lambda: None)
    assert (
        main(["workers", "stacks", "llama", "--state-dir", str(tmp_path / "s"), "--config", str(tmp_path / "c")]) == 1
    )
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("amdtop: error: workers stacks: py-spy is not installed")


@needs_py_spy
@pytest.mark.skipif(os.geteuid() != 0, reason="dropping to another user needs root")
def test_ptrace_denied_is_one_line(tmp_path: Path, python_rank: subprocess.Popen[bytes]) -> None:
    # The real py-spy, run as nobody against this user's process: the kernel refuses the ptrace.
    wrapper = tmp_path / "py-spy-as-nobody"
    wrapper.write_text(f'#!/bin/sh\nexec setpriv --reuid=65534 --regid=65534 --clear-groups {PY_SPY} "$@"\n')
    wrapper.chmod(0o755)
    got = dump_one(0, python_rank.pid, py_spy=str(wrapper))
    assert got.text is None and got.error is not None
    assert got.error.startswith("ptrace denied: py-spy needs to run as the worker's user") and "\n" not in got.error
    assert python_rank.poll() is None


@needs_py_spy
def test_process_gone_before_the_dump(python_rank: subprocess.Popen[bytes]) -> None:
    python_rank.kill()
    python_rank.wait()
    got = dump_one(0, python_rank.pid, py_spy=str(PY_SPY))
    assert got.error == "exited before the dump (nothing to show; nothing was killed)"


@needs_py_spy
def test_process_exiting_mid_dump(tmp_path: Path) -> None:
    # The rank is alive when the dump starts and exits on its own before py-spy reaches it (py-spy starts late).
    leaving = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.6)"])
    other = subprocess.Popen([sys.executable, "-c", SCRIPT])
    try:
        wrapper = tmp_path / "slow-py-spy"
        wrapper.write_text(f'#!/bin/sh\nsleep 1.5\nexec {PY_SPY} "$@"\n')
        wrapper.chmod(0o755)
        time.sleep(0.2)
        got = dump_stacks([(0, leaving.pid), (1, other.pid)], py_spy=str(wrapper))
        assert got[0].error == "exited during the dump (nothing to show; nothing was killed)"
        assert got[1].error is None and got[1].text is not None  # the next rank is still dumped
        assert other.poll() is None
    finally:
        leaving.wait()
        other.kill()
        other.wait()
