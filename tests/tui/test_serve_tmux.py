"""`amdtop serve` with viewers in real terminals (tmux): one poller, the header, a viewer SIGKILLed, the serve
stopped or killed, and a ramp that outlives the viewer that started it (the simulated node's workers, --demo)."""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from amdtop.serve.client import ServeClient
from amdtop.serve.wire import socket_path

pytestmark = [
    pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux not installed"),
    pytest.mark.serial,  # the demo workers' fixed ports (18080-18082) and real terminals' timing
]

AMDTOP = Path(sys.executable).with_name("amdtop")
INTERVAL = 0.5


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ServeProc:
    def __init__(self, tmp: Path) -> None:
        self.state = tmp / "state"
        self.config = tmp / "none.toml"
        self.port = _free_port()
        self.log = (tmp / "serve.log").open("w")
        self.proc = subprocess.Popen(
            [str(AMDTOP), "serve", "--demo", "--interval", str(INTERVAL), "--state-dir", str(self.state),
             "--config", str(self.config), "--listen", f"127.0.0.1:{self.port}"],
            stdout=self.log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        deadline = time.monotonic() + 60
        while not socket_path(self.state).exists():
            assert self.proc.poll() is None, (tmp / "serve.log").read_text()
            assert time.monotonic() < deadline, "serve did not open its socket"
            time.sleep(0.1)

    def polls(self) -> float:
        text = httpx.get(f"http://127.0.0.1:{self.port}/metrics", timeout=10).text
        match = re.search(r"^amdtop_polls_total\{[^}]*\} (\S+)$", text, re.M)
        assert match, text[:2000]
        return float(match.group(1))

    def stop(self) -> None:
        if self.proc.poll() == -signal.SIGKILL:
            # A killed serve could not stop the demo workers it launched: stop them as an operator would.
            for name in ("llama-70b", "qwen-32b", "mistral-7b"):
                subprocess.run(
                    [str(AMDTOP), "workers", "--demo", "--state-dir", str(self.state), "--config", str(self.config),
                     "stop", name], capture_output=True, timeout=60,
                )  # fmt: skip
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.log.close()


class Panes:
    """Viewers in one tmux server, one session each; panes stay after their process exits (their last words)."""

    def __init__(self, tmp: Path) -> None:
        self.socket = f"amdtop-serve-test-{os.getpid()}"
        self.tmp = tmp
        conf = tmp / "tmux.conf"
        conf.write_text("set -g remain-on-exit on\n")
        self.conf = conf

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["tmux", "-L", self.socket, *args], capture_output=True, text=True, timeout=20)

    def start(self, name: str, serve: ServeProc, *extra: str) -> None:
        # The shell stays after amdtop so that its last words and exit status stay on the screen (tmux 3.3 shows a
        # dead pane empty once the program left the alternate screen).
        cmd = (
            f"unset COLUMNS LINES; {AMDTOP} --state-dir {serve.state} --config {serve.config} {' '.join(extra)}; "
            "echo amdtop-exit=$?; sleep 600"
        )
        self.run("-f", str(self.conf), "new-session", "-d", "-s", name, "-x", "200", "-y", "50",
                 "-eTERM=xterm-256color", "sh", "-c", cmd)  # fmt: skip

    def screen(self, name: str) -> str:
        return self.run("capture-pane", "-p", "-t", name).stdout

    def wait_for(self, name: str, *texts: str, timeout: float = 60.0) -> str:
        deadline = time.monotonic() + timeout
        screen = ""
        while time.monotonic() < deadline:
            screen = self.screen(name)
            if all(t in " ".join(screen.split()) for t in texts):
                return screen
            time.sleep(0.2)
        raise AssertionError(f"{texts!r} not on {name}'s screen:\n{screen}")

    def kill(self) -> None:
        self.run("kill-server")


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[ServeProc]:
    proc = ServeProc(tmp_path)
    try:
        yield proc
    finally:
        proc.stop()


@pytest.fixture
def panes(tmp_path: Path) -> Iterator[Panes]:
    p = Panes(tmp_path)
    try:
        yield p
    finally:
        p.kill()


def _viewer_pids(serve: ServeProc) -> list[int]:
    """Pids of the viewers attached, not counting the one that asks."""
    client = ServeClient(serve.state)
    try:
        return [pid for pid in client.call("stats", timeout=30)["viewer_pids"] if pid != os.getpid()]
    finally:
        client.close()


def _viewers(serve: ServeProc) -> int:
    return len(_viewer_pids(serve))


def _wait(cond, timeout: float = 30.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.2)


def test_three_viewers_one_poller_sigkill_one_then_the_serve_stops(serve: ServeProc, panes: Panes) -> None:
    header = f"attached to amdtop serve (pid {serve.proc.pid})"
    for name in ("v1", "v2", "v3"):
        panes.start(name, serve)
    for name in ("v1", "v2", "v3"):
        panes.wait_for(name, header, "llama-70b")
    _wait(lambda: _viewers(serve) == 3)

    # One poller: the serve's backend polls go at the interval, three viewers or not.
    first, t0 = serve.polls(), time.monotonic()
    time.sleep(6)
    rate = (serve.polls() - first) / (time.monotonic() - t0)
    assert 0.6 / INTERVAL <= rate <= 1.1 / INTERVAL, rate

    # A viewer killed outright: the serve goes on and forgets it.
    victim = _viewer_pids(serve)[0]
    os.kill(victim, signal.SIGKILL)
    _wait(lambda: _viewers(serve) == 2)
    assert serve.proc.poll() is None
    before = serve.polls()
    _wait(lambda: serve.polls() >= before + 3)

    # The serve stopped: the viewers say so and exit with status 1 (documented: they do not fall back to polling).
    serve.proc.send_signal(signal.SIGTERM)
    assert serve.proc.wait(30) == 0
    said = f"amdtop serve (pid {serve.proc.pid}): serve stopped; the viewer exits"
    screens = {name: panes.wait_for(name, "amdtop-exit=") for name in ("v1", "v2", "v3")}
    assert sorted("amdtop-exit=137" in sc for sc in screens.values()) == [False, False, True]
    for screen in screens.values():
        if "amdtop-exit=137" not in screen:
            assert said in " ".join(screen.split()) and "amdtop-exit=1" in screen
    assert not socket_path(serve.state).exists()


def test_serve_killed_viewer_says_so_and_exits(serve: ServeProc, panes: Panes) -> None:
    panes.start("v", serve)
    panes.wait_for("v", f"attached to amdtop serve (pid {serve.proc.pid})")
    serve.proc.kill()
    serve.proc.wait(10)
    panes.wait_for("v", f"amdtop serve (pid {serve.proc.pid}): serve connection lost", "amdtop-exit=1")
    # Its stale socket is no obstacle: the next dashboard runs in-process (no serve answers there).
    panes.start("w", serve, "--demo", "--readonly")
    screen = panes.wait_for("w", "llama-70b")
    assert "attached to amdtop serve" not in screen


def test_read_only_viewer_shows_no_control_keys(serve: ServeProc, panes: Panes) -> None:
    panes.start("ro", serve, "--readonly")
    screen = panes.wait_for("ro", "attached to amdtop serve", "read-only")
    assert "Launch" not in screen and "Stop" not in screen


VIEWER_STARTS_RAMP = """
import sys, time
from pathlib import Path
from amdtop.serve.client import ServeClient
c = ServeClient(Path(sys.argv[1]))
frame = c.wait_first_frame(30)
w = next(w for w in frame.workers if w.name == "llama-70b" and w.url)
print(c.call("ramp_start", w.name, w.url, tuple(w.gpus),
             {"concurrencies": (1, 2, 4), "step_seconds": 2.0, "warmup_seconds": 0.5, "refine_points": 0,
              "num_prompts": 16, "output_len": 16, "input_len": 32}), flush=True)
time.sleep(600)
"""


def test_ramp_survives_the_viewer_that_started_it(serve: ServeProc, panes: Panes, tmp_path: Path) -> None:
    def ready() -> bool:
        c = ServeClient(serve.state)
        try:
            frame = c.wait_first_frame(30)
            return frame is not None and any(w.name == "llama-70b" and w.state.value == "ready" for w in frame.workers)
        finally:
            c.close()

    _wait(ready, timeout=90)
    viewer = subprocess.Popen(
        [sys.executable, "-c", VIEWER_STARTS_RAMP, str(serve.state)], stdout=subprocess.PIPE, text=True
    )
    assert viewer.stdout is not None
    assert viewer.stdout.readline().strip() == "ramp llama-70b: started in the serve"
    viewer.kill()  # the viewer's terminal is gone; the ramp is the serve's
    viewer.wait(10)

    # A new viewer in a terminal, re-attached: the ramp screen shows the serve's ramp (live, then its result).
    panes.start("again", serve)
    panes.wait_for("again", "attached to amdtop serve", "llama-70b")
    client = ServeClient(serve.state)
    try:
        _wait(lambda: "llama-70b" in client.ramps, timeout=30)
        _wait(lambda: not client.ramps["llama-70b"][2], timeout=120)
        doc, status, _ = client.ramps["llama-70b"]
        assert doc["finished"] and status == "finished", status
        assert [s["concurrency"] for s in doc["steps"]][:3] == [1, 2, 4]
        assert doc["steps"][0]["completed"] > 0, doc["steps"]
    finally:
        client.close()
    panes.run("send-keys", "-t", "again", "a")  # the selected worker is the first: llama-70b
    screen = panes.wait_for("again", "Ramp llama-70b", "[finished]")
    assert "knee" in screen or "Conc" in screen
