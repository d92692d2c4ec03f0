"""amdtop serve's socket, wire and queues against a real serve over the simulated node (no fixed ports)."""

from __future__ import annotations

import os
import shutil
import socket
import stat
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from amdtop import runtime
from amdtop.cli.common import node_spec
from amdtop.cli.main import build_parser
from amdtop.errors import AmdtopError
from amdtop.pipeline.frame import NodeFrame
from amdtop.serve.client import ServeClient, ServeGone, attach
from amdtop.serve.server import Serve, running_serve_pid
from amdtop.serve.viewers import QUEUE_FRAMES, FramePacket, ViewerLink
from amdtop.serve.wire import (
    WIRE_VERSION,
    WireError,
    check_version,
    read_message,
    send_message,
    socket_path,
)


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


def _wait(cond, timeout: float = 10.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.02)


def test_socket_is_owner_only(serve: Serve) -> None:
    mode = serve.path.stat().st_mode
    assert stat.S_ISSOCK(mode)
    assert stat.S_IMODE(mode) == 0o600


def test_second_serve_for_the_same_state_dir_is_refused(serve: Serve) -> None:
    other = Serve(serve.service, serve.state_dir)
    with pytest.raises(AmdtopError, match=rf"already runs .*\(pid {os.getpid()}\)"):
        other.bind()
    assert running_serve_pid(serve.state_dir) == os.getpid()


def test_stale_socket_of_a_killed_serve_is_replaced(tmp_path: Path) -> None:
    path = socket_path(tmp_path)
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dead.bind(str(path))
    dead.close()  # the file stays, nobody listens: what a SIGKILLed serve leaves
    assert attach(tmp_path, readonly=False) is None
    assert running_serve_pid(tmp_path) is None


@pytest.mark.skipif(os.getuid() != 0, reason="needs root to connect as another uid")
def test_peer_of_another_uid_is_refused_even_when_the_file_lets_it_in(serve: Serve) -> None:
    # A state dir that others may traverse (pytest's tmp dirs are 0700) and a socket opened up on purpose: the mode
    # is the first wall, SO_PEERCRED the second, and this checks the second alone.
    base = Path(tempfile.mkdtemp(prefix="amdtop-peer-"))
    os.chmod(base, 0o711)
    open_serve = Serve(serve.service, base).start()
    os.chmod(open_serve.path, 0o666)
    try:
        _refused_as_nobody(open_serve)
    finally:
        open_serve.close()
        shutil.rmtree(base, ignore_errors=True)


def _refused_as_nobody(serve: Serve) -> None:
    pid = os.fork()
    if pid == 0:  # the child: nobody
        code = 1
        try:
            os.setuid(65534)
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.settimeout(5)
            s.connect(str(serve.path))
            code = 0 if s.recv(1) == b"" else 3  # closed at once, no hello
        except Exception:
            code = 2
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    _wait(lambda: serve.refused == 1)


def test_viewer_gets_frames_with_history_and_the_serve_polls_alone(serve: Serve) -> None:
    client = ServeClient(serve.state_dir)
    try:
        first = client.wait_first_frame(10)
        assert isinstance(first, NodeFrame)
        assert first.history and first.history[0].util_pct  # the serve's history, drawn from the first frame
        assert client.pid == os.getpid() and client.interval == 0.2
        _wait(lambda: client.frames >= 3)
        assert client.call("stats")["viewers"] == 1
    finally:
        client.close()


def test_three_viewers_get_identical_frames(serve: Serve) -> None:
    seen: list[dict[int, float | None]] = [{}, {}, {}]
    clients = [ServeClient(serve.state_dir) for _ in range(3)]
    try:
        for c, log in zip(clients, seen, strict=True):
            c.subscribe(lambda f, log=log: log.__setitem__(f.tick, f.made_at))
        _wait(lambda: all(len(s) >= 5 for s in seen))
        common = set(seen[0]) & set(seen[1]) & set(seen[2])
        assert len(common) >= 4
        for tick in common:
            assert seen[0][tick] == seen[1][tick] == seen[2][tick]
    finally:
        for c in clients:
            c.close()


def test_read_only_viewer_is_refused_control(serve: Serve) -> None:
    client = ServeClient(serve.state_dir, readonly=True)
    try:
        for op, args in (("launch", ("llama-70b",)), ("stop", ("llama-70b",)), ("ramp_abort", ("llama-70b",))):
            with pytest.raises(AmdtopError, match=f"{op}: refused: read-only"):
                client.call(op, *args, timeout=10)
        assert [w.name for w in client.call("status", timeout=30)]  # reading is allowed
    finally:
        client.close()


def test_version_mismatch_is_one_clear_line_on_both_sides(serve: Serve, tmp_path: Path) -> None:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(str(serve.path))
    assert read_message(s)["version"] == WIRE_VERSION
    send_message(s, {"type": "hello", "version": "9.9", "pid": 1})
    assert read_message(s) == {"type": "error", "text": f"serve is {WIRE_VERSION}, viewer 9.9: restart the viewer"}
    s.close()
    with pytest.raises(WireError, match=rf"^serve is 0\.0, viewer {WIRE_VERSION}: restart serve$"):
        check_version("0.0", serve_side=False)

    # A viewer meeting an older serve: a listener that says 0.0.
    path = tmp_path / "old" / "serve.sock"
    path.parent.mkdir()
    old = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old.bind(str(path))
    old.listen(1)

    def answer() -> None:
        conn, _ = old.accept()
        send_message(conn, {"type": "hello", "version": "0.0", "pid": 1, "interval": 1.0})
        conn.close()

    threading.Thread(target=answer, daemon=True).start()
    with pytest.raises(WireError, match="restart serve"):
        ServeClient(path.parent)
    old.close()


def test_viewer_killed_leaves_the_serve_running(serve: Serve) -> None:
    client = ServeClient(serve.state_dir)
    client.wait_first_frame(10)
    client.sock.close()  # what the kernel does for a SIGKILLed viewer
    _wait(lambda: serve.viewer_count == 0)
    polls = serve.runtime.polls
    _wait(lambda: serve.runtime.polls > polls + 2)


def test_serve_stopping_tells_the_viewer(serve: Serve) -> None:
    client = ServeClient(serve.state_dir)
    gone: list[str] = []
    client.on_gone(gone.append)
    client.wait_first_frame(10)
    serve.close("serve stopped")
    _wait(lambda: bool(gone))
    assert gone == [f"amdtop serve (pid {os.getpid()}): serve stopped"]
    with pytest.raises(ServeGone):
        client.call("status", timeout=5)
    assert not serve.path.exists()


def _big_frame() -> NodeFrame:
    from amdtop.model import NodeSnapshot, Topology

    snap = NodeSnapshot(timestamp=0.0, hostname="h" * (1 << 20), backend="sim", topology=Topology((), (), ()), gpus=())
    return NodeFrame(snapshot=snap)


def test_slow_viewer_drops_frames_instead_of_growing_the_queue() -> None:
    ours, theirs = socket.socketpair()
    ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    link = ViewerLink(ours, 1, readonly=True).start()
    big = FramePacket(_big_frame())  # nobody reads `theirs`
    for _ in range(50):
        link.offer_frame(big)
    assert len(link._frames) <= QUEUE_FRAMES
    assert link.dropped >= 50 - QUEUE_FRAMES - 2  # at most one in the writer's hands, one in the kernel buffer
    link.close()
    theirs.close()


def _voluntary_switches(tid: int) -> int:
    with open(f"/proc/self/task/{tid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("voluntary_ctxt_switches"))


def test_a_frame_the_socket_takes_goes_out_without_waking_the_writer() -> None:
    from amdtop.model import NodeSnapshot, Topology

    ours, theirs = socket.socketpair()
    link = ViewerLink(ours, 1, readonly=True).start()
    try:
        time.sleep(0.1)
        tid = link._thread.native_id
        assert tid is not None
        before = _voluntary_switches(tid)
        for tick in range(1, 11):
            snap = NodeSnapshot(timestamp=0.0, hostname="h", backend="sim", topology=Topology((), (), ()), gpus=())
            link.offer_frame(FramePacket(NodeFrame(snapshot=snap, tick=tick)))
            assert read_message(theirs)["frame"].tick == tick
            time.sleep(0.02)  # as ticks come: a writer woken for a frame has time to run and sleep again
        # A writer woken for each frame switches at least 10 times (the queued path, or a needless notify; 0-1 here).
        assert _voluntary_switches(tid) - before <= 2
        assert link.sent == 10
    finally:
        link.close()
        theirs.close()


def test_a_frame_larger_than_the_socket_takes_is_finished_by_the_writer_before_a_reply() -> None:
    ours, theirs = socket.socketpair()
    ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    link = ViewerLink(ours, 1, readonly=True).start()
    try:
        big = _big_frame()
        link.offer_frame(FramePacket(big))  # the send takes a few KB of ~1 MB; the caller does not wait for the rest
        assert link._rest or link._busy or link._frames
        link.send({"type": "reply", "id": 7, "ok": True, "value": "after the frame"})
        first = read_message(theirs)
        assert first["type"] == "frame" and first["frame"].snapshot.hostname == big.snapshot.hostname
        assert read_message(theirs) == {"type": "reply", "id": 7, "ok": True, "value": "after the frame"}
        # The writer counts a message once its sendall returns, which may be after this side read it (a clean
        # clone's parallel step read 1 here): wait for the count, briefly.
        deadline = time.monotonic() + 5.0
        while link.sent < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert link.sent == 2
    finally:
        link.close()
        theirs.close()


def test_launch_gate_refusal_reaches_the_viewer_as_itself(serve: Serve, monkeypatch: pytest.MonkeyPatch) -> None:
    from amdtop.audit.gate import GateRefused

    class Gated:
        def launch(self, name: str, force: bool = False) -> None:
            if not force:
                raise GateRefused(name, "launch", [])
            return None

    monkeypatch.setattr(serve.service._node, "control", Gated())
    client = ServeClient(serve.state_dir)
    try:
        with pytest.raises(GateRefused, match=r"worker\[llama-70b\]: launch refused"):
            client.call("launch", "llama-70b", force=False, timeout=10)
        assert client.call("launch", "llama-70b", force=True, timeout=10) is None  # the dialog's --force goes through
    finally:
        client.close()
