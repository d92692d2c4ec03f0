"""Issue 52 item 17: SIGTERM to the dashboard, in a real terminal (tmux), gives the terminal back as it found it:
alternate screen off, mouse reporting off, the cursor shown (the default action killed it with all three on).

tmux keeps each pane's modes as the program set them (``#{alternate_on}``, ``#{mouse_any_flag}``, ...): the pane's
shell outlives amdtop (``...; echo EXIT=$?; sleep``), so its modes are read after amdtop ended."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux not installed")

AMDTOP = Path(sys.executable).with_name("amdtop")
MODES = (
    "alt=#{alternate_on} any=#{mouse_any_flag} std=#{mouse_standard_flag} sgr=#{mouse_sgr_flag} cursor=#{cursor_flag}"
)


class Pane:
    def __init__(self, tmp: Path) -> None:
        self.socket = f"amdtop-term-{os.getpid()}"
        self.tmp = tmp

    def tmux(self, *args: str) -> str:
        return subprocess.run(["tmux", "-L", self.socket, *args], capture_output=True, text=True, timeout=20).stdout

    def start(self, amdtop_args: str) -> None:
        cmd = f"unset COLUMNS LINES; {AMDTOP} {amdtop_args}; echo EXIT=$?; sleep 600"
        self.tmux("new-session", "-d", "-s", "t", "-x", "120", "-y", "40", "-eTERM=xterm-256color", "sh", "-c", cmd)

    def modes(self) -> str:
        return self.tmux("display-message", "-p", "-t", "t", MODES).strip()

    def screen(self) -> str:
        return self.tmux("capture-pane", "-p", "-t", "t")

    def amdtop_pid(self) -> int:
        shell = int(self.tmux("display-message", "-p", "-t", "t", "#{pane_pid}").strip())
        children = Path(f"/proc/{shell}/task/{shell}/children").read_text().split()
        assert children, "amdtop is not running in the pane"
        return int(children[0])

    def wait_for(self, text: str, timeout: float = 60.0) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            screen = self.screen()
            if text in screen:
                return screen
            time.sleep(0.2)
        raise AssertionError(f"{text!r} not on screen:\n{self.screen()}")


@pytest.fixture
def pane(tmp_path: Path) -> Iterator[Pane]:
    p = Pane(tmp_path)
    yield p
    p.tmux("kill-server")


def _sigterm_restores(pane: Pane) -> None:
    pane.wait_for("Quit")
    assert pane.modes() == "alt=1 any=1 std=0 sgr=1 cursor=0"  # the dashboard's own modes, as the test expects
    os.kill(pane.amdtop_pid(), signal.SIGTERM)
    screen = pane.wait_for("EXIT=", timeout=20)  # back on the main screen, where the shell wrote it
    assert "EXIT=0" in screen and "Traceback" not in screen, screen
    assert pane.modes() == "alt=0 any=0 std=0 sgr=0 cursor=1"


def test_item17_sigterm_restores_the_terminal(pane: Pane) -> None:
    pane.start(f"--backend sim --no-attach --state-dir {pane.tmp / 'state'} --config {pane.tmp / 'none.toml'}")
    _sigterm_restores(pane)


def test_item17_sigterm_restores_the_terminal_of_an_attached_viewer(pane: Pane) -> None:
    state = pane.tmp / "state"
    serve = subprocess.Popen(
        [str(AMDTOP), "--backend", "sim", "--state-dir", str(state), "--config", str(pane.tmp / "none.toml"),
         "serve", "--listen", "127.0.0.1:0"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert serve.stderr is not None
        while "serving" not in (line := serve.stderr.readline()):
            assert line, "serve exited"
        pane.start(f"--state-dir {state} --config {pane.tmp / 'none.toml'}")
        pane.wait_for("attached to amdtop serve")
        _sigterm_restores(pane)
    finally:
        serve.terminate()
        serve.wait(timeout=20)
