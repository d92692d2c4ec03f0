"""Issue 52 (hostile input, round five), the serve's side: a stopped serve is alive, a viewer meeting a stopped serve
gets one line, the accept loop outlives EMFILE, wakes are rate-limited per viewer, stuck viewers are closed together.
Each test reproduced its item against the code before the fix; real processes, real sockets, real signals."""

from __future__ import annotations

import os
import resource
import select
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from amdtop import runtime
from amdtop.cli.common import node_spec
from amdtop.cli.main import build_parser
from amdtop.serve.client import ServeClient, ServeNotAnswering, attach
from amdtop.serve.server import Serve, running_serve_pid
from amdtop.serve.wire import WIRE_VERSION, read_message, send_message, socket_path

AMDTOP = Path(sys.executable).with_name("amdtop")


def _serve(state: Path, *extra: str, interval: str = "0.5") -> subprocess.Popen[str]:
    """A real ``amdtop serve`` on the simulated node, once it says it serves."""
    proc = subprocess.Popen(
        [str(AMDTOP), "--backend", "sim", "--state-dir", str(state), "--config", str(state.parent / "none.toml"),
         "--interval", interval, "serve", "--listen", "127.0.0.1:0", *extra],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert proc.stderr is not None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if "serving" in line:
            return proc
        assert line or proc.poll() is None, "serve exited"
    raise AssertionError("serve did not start")


def _end(proc: subprocess.Popen[str]) -> str:
    """Stop (resume first, in case it is stopped) and return what it said on stderr after starting."""
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGCONT)
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
    proc.wait()
    return proc.stderr.read() if proc.stderr else ""


def _said(proc: subprocess.Popen[str], text: str, timeout: float) -> str:
    """The first line of ``proc``'s stderr that holds ``text`` (AssertionError after ``timeout``)."""
    assert proc.stderr is not None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not select.select([proc.stderr], [], [], max(deadline - time.monotonic(), 0))[0]:
            break
        line = proc.stderr.readline()
        assert line, "the process exited"
        if text in line:
            return line
    raise AssertionError(f"no line with {text!r} in {timeout} s")


@pytest.fixture
def stopped_serve(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], Path]]:
    state = tmp_path / "state"
    proc = _serve(state)
    os.kill(proc.pid, signal.SIGSTOP)
    try:
        yield proc, state
    finally:
        _end(proc)


# -- item 1: a serve that does not answer is alive -------------------------------------------------------------------
def test_item1_a_stopped_serve_keeps_its_state_dir(stopped_serve: tuple[subprocess.Popen[str], Path]) -> None:
    first, state = stopped_serve
    inode = os.lstat(socket_path(state)).st_ino
    assert running_serve_pid(state) == first.pid  # no reply needed: the lock and the pid
    r = subprocess.run(
        [str(AMDTOP), "--backend", "sim", "--state-dir", str(state), "--config", str(state.parent / "none.toml"),
         "serve", "--listen", "127.0.0.1:0"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert r.returncode == 1, r.stderr
    assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr, r.stderr
    assert f"already runs for {state} (pid {first.pid}, stopped: `kill -CONT {first.pid}`" in r.stderr, r.stderr
    assert os.lstat(socket_path(state)).st_ino == inode, "the refused serve replaced the stopped one's socket"
    os.kill(first.pid, signal.SIGCONT)
    client = ServeClient(state, timeout=30)
    try:
        assert client.call("stats", timeout=30)["viewers"] == 1  # the first serve answers again: nobody took over
    finally:
        client.close()


def test_item1_a_killed_serve_leaves_no_lock_behind(tmp_path: Path) -> None:
    state = tmp_path / "state"
    proc = _serve(state)
    proc.kill()  # SIGKILL: no cleanup at all, the socket stays
    proc.wait()
    assert socket_path(state).exists()
    assert running_serve_pid(state) is None and attach(state, readonly=True) is None
    again = _serve(state)  # the stale socket is replaced
    try:
        assert running_serve_pid(state) == again.pid
    finally:
        assert "Traceback" not in _end(again)


# -- item 11: a viewer meeting a stopped serve -----------------------------------------------------------------------
def test_item11_the_dashboard_names_a_stopped_serve_in_one_line(
    stopped_serve: tuple[subprocess.Popen[str], Path],
) -> None:
    first, state = stopped_serve
    r = subprocess.run(
        [str(AMDTOP), "--state-dir", str(state), "--config", str(state.parent / "none.toml")],
        capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    lines = r.stderr.splitlines()
    assert len(lines) == 1, r.stderr
    assert f"pid {first.pid}" in lines[0] and str(socket_path(state)) in lines[0], lines[0]
    assert "stopped" in lines[0] and f"kill -CONT {first.pid}" in lines[0], lines[0]
    with pytest.raises(ServeNotAnswering, match=rf"pid {first.pid}.*did not answer"):
        attach(state, readonly=True)


# -- item 8: the accept loop outlives EMFILE -------------------------------------------------------------------------
def _low_fd_limit() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (128, 128))


def test_item8_the_serve_accepts_again_once_descriptors_are_free(tmp_path: Path) -> None:
    state = tmp_path / "state"
    proc = subprocess.Popen(
        [str(AMDTOP), "--backend", "sim", "--state-dir", str(state), "--config", str(tmp_path / "none.toml"),
         "--interval", "0.5", "serve", "--listen", "127.0.0.1:0"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, preexec_fn=_low_fd_limit,
    )  # fmt: skip
    assert proc.stderr is not None
    said: list[str] = []
    try:
        while "serving" not in (line := proc.stderr.readline()):
            assert line, "serve exited"
        held: list[socket.socket] = []
        full = False
        while len(held) < 150 and not full:  # more than the 128 descriptors it may open: accept() fails, EMFILE
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.setblocking(False)
            held.append(s)
            deadline = time.monotonic() + 3
            while True:
                try:
                    s.connect(str(socket_path(state)))
                    break
                except BlockingIOError:  # the backlog is full: wait for the serve to take one
                    if time.monotonic() > deadline:
                        full = True  # it takes no more: out of descriptors
                        break
                    time.sleep(0.02)
        line = _said(proc, "accepting a viewer failed", 30)
        said.append(line)
        for s in held:
            s.close()
        client = ServeClient(state, timeout=30)  # the loop is still there: the viewer gets in
        try:
            assert client.call("stats", timeout=30)["viewers"] == 1
        finally:
            client.close()
        assert proc.poll() is None
    finally:
        rest = _end(proc)
    assert "Traceback" not in rest, rest
    assert "Too many open files" in said[0], said


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Serve]:
    args = build_parser().parse_args(
        ["--demo", "--state-dir", str(tmp_path / "state"), "--config", str(tmp_path / "none.toml"), "--interval", "0.2"]
    )
    service = runtime.open(node_spec(args), ui=True)
    srv = Serve(service, tmp_path / "state")
    srv.start()
    service.runtime.start()
    try:
        yield srv
    finally:
        srv.close()
        service.shutdown()


def _raw_viewer(serve: Serve, *, readonly: bool = False) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(10)
    sock.connect(str(serve.path))
    assert read_message(sock)["type"] == "hello"
    send_message(sock, {"type": "hello", "version": WIRE_VERSION, "pid": os.getpid(), "readonly": readonly})
    return sock


def _wait(cond, timeout: float = 10.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.02)


# -- item 18: viewers that stopped reading are closed together -------------------------------------------------------
def test_item18_thirty_stuck_viewers_cost_one_bound_together(serve: Serve) -> None:
    stuck = [_raw_viewer(serve) for _ in range(30)]  # they never read again
    try:
        _wait(lambda: serve.viewer_count == 30)
        for link in list(serve._viewers):
            # The smallest send buffer the kernel allows: a frame or two fill it, the writer blocks in sendall.
            link.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1)
        _wait(lambda: all(link._busy for link in serve._viewers))
        started = time.monotonic()
        serve.close()
        took = time.monotonic() - started
    finally:
        for s in stuck:
            s.close()
    assert took < 3.0, f"closing 30 stuck viewers took {took:.1f} s (one bound of 1 s for all)"


# -- item 15: wakes are rate-limited per viewer (issue 53: and the ones in between held, coalesced) ------------------
def test_item15_a_viewer_waking_in_a_loop_does_not_make_the_serve_poll_in_a_loop(tmp_path: Path) -> None:
    state = tmp_path / "state"
    proc = _serve(state, interval="5")
    try:
        serve_cpu = _cpu_s(proc.pid)
        client = ServeClient(state, readonly=True, timeout=30)
        try:
            before = client.call("stats", timeout=30)["polls"]
            started = time.monotonic()
            answered = 0
            while time.monotonic() - started < 3.0:
                client.call("wake", timeout=30)  # each is answered: nothing piles up on the viewer's side
                answered += 1
            took = time.monotonic() - started
            polls = client.call("stats", timeout=30)["polls"] - before
        finally:
            client.close()
        serve_cpu = _cpu_s(proc.pid) - serve_cpu
    finally:
        rest = _end(proc)
    # The first wake runs at once, every later one waits for its gap's end: the loop is paced by the serve (it ran
    # ~3000 round trips in 3 s when a wake in the gap was answered at once, a third of a core of the serve's).
    assert 3 <= answered <= took + 2, answered
    # One wake a second for this viewer, and the interval's own ticks (one in 5 s): 3 s of wakes is 5 polls at most.
    assert polls <= took + 2, f"{answered} wakes in {took:.1f} s made {polls} polls"
    assert serve_cpu < 0.5 * took, f"the serve spent {serve_cpu:.2f} s of CPU in {took:.1f} s of wakes"
    assert "Traceback" not in rest, rest


def _cpu_s(pid: int) -> float:
    """User and system CPU seconds of ``pid`` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_item15_a_wake_inside_the_gap_is_held_and_runs_at_its_end_not_dropped(tmp_path: Path) -> None:
    state = tmp_path / "state"
    proc = _serve(state, interval="30")
    try:
        client = ServeClient(state, readonly=True, timeout=30)
        try:
            client.call("wake", timeout=30)  # this gap's wake
            time.sleep(0.5)
            before = client.call("stats", timeout=30)["polls"]
            # Two more inside the gap, sent without waiting (as the dashboard's wake is): held, then one tick for both.
            held = [client.call_async("wake"), client.call_async("request_state_files")]
            time.sleep(0.2)
            assert not any(f.done() for f in held)  # not answered before the gap's end
            assert [f.result(timeout=30) for f in held] == [None, None]
            deadline = time.monotonic() + 10
            while (polls := client.call("stats", timeout=30)["polls"] - before) < 1 and time.monotonic() < deadline:
                time.sleep(0.05)
        finally:
            client.close()
    finally:
        rest = _end(proc)
    assert polls == 1, f"two held wakes made {polls} polls (the interval is 30 s: the tick came from them)"
    assert "Traceback" not in rest, rest


BUSY = """
import socket, sys, time
from pathlib import Path
from amdtop.serve import lock
state = Path(sys.argv[1])
held = lock.take(state)  # a serve's lock and socket, and no hello: a serve too busy to answer
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind(str(state / "serve.sock"))
s.listen(16)
print("ready", flush=True)
time.sleep(600)
"""


def test_item11_a_busy_serve_is_named_and_not_replaced(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    busy = subprocess.Popen([sys.executable, "-c", BUSY, str(state)], stdout=subprocess.PIPE, text=True)
    try:
        assert busy.stdout is not None and busy.stdout.readline() == "ready\n"
        started = time.monotonic()
        with pytest.raises(ServeNotAnswering) as exc:
            attach(state, readonly=True)
        assert time.monotonic() - started < 10
        assert str(exc.value) == (
            f"amdtop serve (pid {busy.pid}, socket {socket_path(state)}) did not answer in time: it is busy; try again, "
            f"or end it (kill {busy.pid}) and start it again"
        )
        r = subprocess.run(
            [str(AMDTOP), "--backend", "sim", "--state-dir", str(state), "--config", str(tmp_path / "none.toml"),
             "serve", "--listen", "127.0.0.1:0"],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert r.returncode == 1 and f"already runs for {state} (pid {busy.pid})" in r.stderr, r.stderr
    finally:
        busy.kill()
        busy.wait()
