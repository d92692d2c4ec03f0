"""Issue 38 (hostile input, round four), the serve's side: a planted listener, a second serve, clients that never
read, numbers and fields from the wire. Each test reproduced its item against the code before the fix."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from amdtop import runtime
from amdtop.cli.common import node_spec
from amdtop.cli.main import build_parser
from amdtop.errors import AmdtopError
from amdtop.serve.client import ServeClient, attach
from amdtop.serve.server import Serve, running_serve_pid
from amdtop.serve.wire import WIRE_VERSION, read_message, send_message, socket_path

AMDTOP = Path(sys.executable).with_name("amdtop")
NOBODY = ["setpriv", "--reuid", "nobody", "--regid", "nogroup", "--clear-groups"]


def _as_nobody() -> list[str]:
    if os.geteuid() != 0:
        pytest.skip("running a process as another user needs root (setpriv --reuid)")
    if shutil.which("setpriv") is None:
        pytest.skip("setpriv is not installed")
    if subprocess.run([*NOBODY, "true"], capture_output=True).returncode != 0:
        pytest.skip("setpriv cannot switch to nobody here")
    return NOBODY


def _wait(cond, timeout: float = 10.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.02)


@pytest.fixture
def shared() -> Iterator[Path]:
    """A folder others may traverse (pytest's are 0700 and root's): where another user's files can be reached."""
    base = Path(tempfile.mkdtemp(prefix="amdtop-h4-"))
    os.chmod(base, 0o711)
    try:
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


PLANTED = textwrap.dedent(
    """\
    import os, pickle, socket, struct, sys
    path, marker = sys.argv[1], sys.argv[2]
    class Payload:
        def __reduce__(self):
            return (os.system, ("touch " + marker,))
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(path)
    os.chmod(path, 0o777)
    s.listen(8)
    print("ready", flush=True)
    while True:
        c, _ = s.accept()
        body = pickle.dumps({"type": "hello", "version": Payload(), "pid": Payload(), "interval": 1.0})
        c.sendall(struct.pack(">I", len(body)) + body)
    """
)


def _plant(state: Path, marker: Path, prefix: list[str]) -> subprocess.Popen[str]:
    script = state.parent / "planted.py"
    script.write_text(PLANTED)
    os.chmod(script, 0o644)
    proc = subprocess.Popen(
        [*prefix, sys.executable, str(script), str(socket_path(state)), str(marker)], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    return proc


@pytest.mark.parametrize("how", ["owned-by-nobody", "world-writable"])
def test_item1_a_listener_another_user_planted_is_never_unpickled(shared: Path, how: str) -> None:
    prefix = _as_nobody()
    state = shared / "state"
    state.mkdir()
    if how == "owned-by-nobody":
        os.chown(state, 65534, 65534)
        os.chmod(state, 0o700)
    else:
        os.chmod(state, 0o777)
    marker = shared / "ran-as-root"
    proc = _plant(state, marker, prefix)
    try:
        for probe in (
            lambda: running_serve_pid(state),
            lambda: ServeClient(state),
            lambda: attach(state, readonly=True),
        ):
            with pytest.raises(AmdtopError, match=r"state dir .*(belongs to uid 65534|writable by others)"):
                probe()
        time.sleep(0.2)
        assert not marker.exists(), "the planted listener's pickle ran code as root"
    finally:
        proc.kill()
        proc.wait()


def test_item1_the_client_checks_the_serves_uid_before_reading(shared: Path) -> None:
    """SO_PEERCRED from the viewer's side, past the path's checks (as if the folder were swapped after them)."""
    from amdtop.serve import peer

    prefix = _as_nobody()
    state = shared / "state"
    state.mkdir(mode=0o777)
    os.chmod(state, 0o777)
    marker = shared / "ran-as-root"
    proc = _plant(state, marker, prefix)
    try:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(str(socket_path(state)))
        with pytest.raises(AmdtopError, match="runs as uid 65534, not as you or root"):
            peer.check_serve(sock, socket_path(state))
        sock.close()
        assert not marker.exists()
    finally:
        proc.kill()
        proc.wait()


def test_item1_cli_serve_and_web_refuse_a_state_dir_others_can_write(shared: Path) -> None:
    state = shared / "state"
    state.mkdir()
    os.chmod(state, 0o777)
    # --readonly: on code that lets the serve start, it starts no demo workers a timeout would orphan.
    for cmd in (["serve", "--readonly", "--listen", "127.0.0.1:0"], ["web", "--listen", "127.0.0.1:0"]):
        r = subprocess.run(
            [str(AMDTOP), "--demo", "--state-dir", str(state), *cmd],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        lines = r.stderr.strip().splitlines()
        assert r.returncode != 0 and len(lines) == 1, r.stderr
        assert lines[0].startswith("amdtop: error: state dir ") and "writable by others" in lines[0]
        assert not socket_path(state).exists()


def test_item1_the_unpickler_takes_only_frame_and_message_classes() -> None:
    import pickle

    from amdtop.serve.wire import WireError, decode

    class Payload:
        def __reduce__(self):  # type: ignore[no-untyped-def]
            return (os.system, ("true",))

    with pytest.raises(WireError, match=r"os\.system|posix\.system"):
        decode(pickle.dumps({"type": "hello", "x": Payload()}))
    with pytest.raises(WireError, match=r"builtins\.eval"):
        decode(pickle.dumps({"f": eval}))


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Serve]:
    args = build_parser().parse_args(
        ["--demo", "--state-dir", str(tmp_path / "state"), "--config", str(tmp_path / "none.toml"), "--interval", "0.2"]
    )
    node = runtime.open(node_spec(args), ui=True)
    srv = Serve(node, tmp_path / "state")
    srv.start()
    node.runtime.start()
    try:
        yield srv
    finally:
        srv.close()
        node.shutdown()


def _raw_viewer(serve: Serve, hello: dict[str, object] | None = None) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(10)
    sock.connect(str(serve.path))
    assert read_message(sock)["type"] == "hello"
    send_message(sock, hello or {"type": "hello", "version": WIRE_VERSION, "pid": os.getpid(), "readonly": False})
    return sock


def _reply(sock: socket.socket, call_id: int) -> dict[str, object]:
    while True:
        msg = read_message(sock)
        if msg.get("type") == "reply" and msg.get("id") == call_id:
            return msg


# -- item 3: a refused second serve removes nothing ----------------------------------------------------------------
def test_item3_a_refused_second_serve_leaves_the_first_ones_socket(serve: Serve, tmp_path: Path) -> None:
    r = subprocess.run(
        [str(AMDTOP), "serve", "--demo", "--readonly", "--state-dir", str(serve.state_dir),
         "--config", str(tmp_path / "none.toml"), "--listen", "127.0.0.1:0"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    lines = [x for x in r.stderr.splitlines() if x.startswith("amdtop: error:")]
    assert r.returncode != 0 and len(lines) == 1 and "already runs" in lines[0], r.stderr
    assert socket_path(serve.state_dir).exists(), "the refused serve removed the running serve's socket"
    assert running_serve_pid(serve.state_dir) == os.getpid()
    client = ServeClient(serve.state_dir)
    try:
        assert client.call("stats", timeout=10)["viewers"] == 1
    finally:
        client.close()


# -- item 5: a client that never reads its replies -----------------------------------------------------------------
def test_item5_a_client_that_never_reads_is_dropped_and_others_are_answered(
    serve: Serve, capfd: pytest.CaptureFixture[str]
) -> None:
    import psutil

    rss0 = psutil.Process().memory_info().rss
    hog = _raw_viewer(serve)
    hog.settimeout(2)
    sent = 0
    try:
        for i in range(1, 5001):
            send_message(hog, {"type": "call", "id": i, "op": "stats", "args": (), "kwargs": {}})
            sent += 1
    except OSError:
        pass  # dropped: the serve closed its end
    _wait(lambda: serve.viewer_count == 0, timeout=20)
    dropped = [x for x in capfd.readouterr().err.splitlines() if "dropped" in x]
    assert dropped == [f"amdtop: viewer pid {os.getpid()} dropped: over 32 calls unanswered or replies unread"], dropped
    grown = psutil.Process().memory_info().rss - rss0
    assert grown < 300 << 20, f"the serve grew {grown >> 20} MiB for one client"
    other = ServeClient(serve.state_dir)
    try:
        t0 = time.monotonic()
        assert other.call("stats", timeout=10)["viewers"] == 1
        assert time.monotonic() - t0 < 5
    finally:
        other.close()
        hog.close()


# -- item 10: numbers from the wire are checked as the CLI checks them -------------------------------------------
@pytest.mark.parametrize("grace", [1e9, float("nan"), float("inf"), -1.0, "30", True])
def test_item10_grace_from_the_wire_is_validated_and_capped(serve: Serve, grace: object) -> None:
    sock = _raw_viewer(serve)
    try:
        send_message(sock, {"type": "call", "id": 7, "op": "stop", "args": ("llama-70b",), "kwargs": {"grace": grace}})
        reply = _reply(sock, 7)
        assert reply["ok"] is False and "grace" in str(reply["error"]), reply
        assert reply["input"] is True
    finally:
        sock.close()


# -- item 13: malformed fields are one error, never a traceback --------------------------------------------------------
def test_item13_malformed_hello_and_call_fields_are_one_error_each(
    serve: Serve, capfd: pytest.CaptureFixture[str]
) -> None:
    sock = _raw_viewer(serve, {"type": "hello", "version": WIRE_VERSION, "pid": "abc", "readonly": False})
    msg = read_message(sock)
    assert msg["type"] == "error" and "pid" in str(msg["text"]), msg
    sock.close()
    sock = _raw_viewer(serve)
    try:
        bad = [
            {"type": "call", "id": 1, "op": "status", "args": (), "kwargs": ["x"]},
            {"type": "call", "id": 2, "op": "status", "args": 5, "kwargs": {}},
            {"type": "call", "id": 3, "op": "stop", "args": (42,), "kwargs": {}},
            {"type": "call", "id": 4, "op": "retune", "args": ("llama-70b", ["x"]), "kwargs": {}},
            {"type": "call", "id": 5, "op": "launch", "args": ("llama-70b",), "kwargs": {"force": "yes"}},
        ]
        for call in bad:
            send_message(sock, call)
            reply = _reply(sock, int(call["id"]))  # type: ignore[call-overload]
            assert reply["ok"] is False and len(str(reply["error"]).splitlines()) == 1, reply
        send_message(sock, {"type": "call", "id": 9, "op": "stats", "args": (), "kwargs": {}})
        assert _reply(sock, 9)["ok"] is True  # the connection and the serve go on
    finally:
        sock.close()
    time.sleep(0.3)
    assert "Traceback" not in capfd.readouterr().err


def test_item13_serve_sock_a_directory_is_one_line(tmp_path: Path) -> None:
    state = tmp_path / "state"
    (state / "serve.sock").mkdir(parents=True)
    for argv in (
        ["serve", "--demo", "--readonly", "--listen", "127.0.0.1:0"],
        ["snapshot", "--demo", "--json"],
    ):
        r = subprocess.run(
            [str(AMDTOP), *argv[:1], "--state-dir", str(state), "--config", str(tmp_path / "none.toml"), *argv[1:]],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        if argv[0] == "serve":
            assert r.returncode != 0 and "Traceback" not in r.stderr, r.stderr
            errors = [x for x in r.stderr.splitlines() if x.startswith("amdtop: error:")]
            assert len(errors) == 1 and "is a directory" in errors[0], r.stderr
        else:
            assert "Traceback" not in r.stderr, r.stderr
    assert (state / "serve.sock").is_dir()  # nothing removed


def test_item10_an_op_declared_later_keeps_the_number_rules() -> None:
    from amdtop.errors import InputError
    from amdtop.serve.limits import check_args

    assert check_args("sleep", ("w",), {"level": 1}) == (("w",), {"level": 1})
    for kwargs in ({"grace": 1e9}, {"force": "yes"}, {"level": float("nan")}):
        with pytest.raises(InputError):
            check_args("sleep", ("w",), kwargs)
    assert check_args("stop", ("w",), {"grace": 30}) == (("w",), {"grace": 30.0})
