"""`amdtop --demo` in a real terminal (tmux): first paint, keys, quit, and no process left after the terminal dies."""

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

from amdtop.procinfo import list_pids, read_cmdline

pytestmark = [
    pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux not installed"),
    pytest.mark.serial,  # the demo's fixed ports (18080-18082) and a real terminal's timing
]

AMDTOP = Path(sys.executable).with_name("amdtop")


class Tmux:
    def __init__(self, tmp: Path, block_sighup: bool = False) -> None:
        self.socket = f"amdtop-test-{os.getpid()}"
        self.tmp = tmp
        self.pidfile = tmp / "pid"
        # A blocked signal mask is inherited through fork and exec (tmux server, shell, amdtop): some CI runners
        # and job launchers start everything that way, and then no SIGHUP arrives when the terminal dies.
        self.block_sighup = block_sighup

    def _preexec(self) -> None:
        if self.block_sighup:
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGHUP})

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["tmux", "-L", self.socket, *args], capture_output=True, text=True, timeout=20, preexec_fn=self._preexec
        )

    def start(self, width: int = 200, height: int = 50, path: str | None = None) -> None:
        cmd = (
            f"unset COLUMNS LINES; echo $$ > {self.pidfile}; exec {AMDTOP} --demo --interval 0.5 "
            f"--state-dir {self.tmp / 'state'} --config {self.tmp / 'none.toml'}"
        )
        if path is not None:
            cmd = f"export PATH={path}; {cmd}"
        env = {"TERM": "xterm-256color"}
        # A pane whose amdtop died stays, with its last words, for diagnose().
        conf = self.tmp / "tmux.conf"
        conf.write_text("set -g remain-on-exit on\n")
        self.run("-f", str(conf), "new-session", "-d", "-s", "t", "-x", str(width), "-y", str(height),
                 *(f"-e{k}={v}" for k, v in env.items()), "sh", "-c", cmd)  # fmt: skip

    def screen(self, styles: bool = False) -> str:
        """The pane's text (with ``styles``, its SGR colours and attributes too)."""
        return self.run("capture-pane", "-p", *(["-e"] if styles else []), "-t", "t").stdout

    def wait_for(self, *texts: str, timeout: float = 30.0) -> str:
        deadline = time.monotonic() + timeout
        screen = ""
        while time.monotonic() < deadline:
            screen = self.screen()
            if all(text in screen for text in texts):
                return screen
            time.sleep(0.2)
        raise AssertionError(f"{texts!r} not on screen ({self.diagnose()}):\n{screen}")

    def diagnose(self) -> str:
        """Why a screen can be empty: the session gone, the pane dead, amdtop gone (said in the failure)."""
        pane = self.run(
            "display-message", "-p", "-t", "t", "dead #{pane_dead} status #{pane_dead_status} signal #{pane_dead_signal}"
        )
        try:
            pid = self.pid()
            alive = Path(f"/proc/{pid}").exists()
        except (OSError, ValueError):
            pid, alive = 0, False
        return f"pane: {pane.stdout.strip() or pane.stderr.strip()!r}; amdtop pid {pid} alive: {alive}"

    def wait_without(self, text: str, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while text in self.screen():
            assert time.monotonic() < deadline, f"{text!r} still on screen"
            time.sleep(0.2)

    def keys(self, *keys: str) -> None:
        self.run("send-keys", "-t", "t", *keys)

    def pid(self) -> int:
        return int(self.pidfile.read_text().strip())

    def kill(self) -> None:
        self.run("kill-server")


def gone(pid: int, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        if _zombie(pid):  # exited; tmux keeps a dead pane (remain-on-exit) and may reap it later
            return True
        time.sleep(0.1)
    return False


def _zombie(pid: int) -> bool:
    try:
        return "\nState:\tZ" in Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return True


@pytest.fixture
def tmux(tmp_path: Path) -> Iterator[Tmux]:
    t = Tmux(tmp_path)
    yield t
    t.kill()
    # The demo workers this test's amdtop launched hold the demo's fixed ports: the next test's demo needs them free,
    # whatever happened here (a failed test must not fail the next one).
    deadline = time.monotonic() + 15
    while demo_worker_pids(tmp_path / "state") and time.monotonic() < deadline:
        time.sleep(0.2)
    for pid in demo_worker_pids(tmp_path / "state"):
        os.kill(pid, signal.SIGKILL)


def test_demo_in_tmux_keys_and_quit(tmux: Tmux) -> None:
    tmux.start()
    # The panes come first; the first poll's numbers follow (later on a loaded machine).
    tmux.wait_for("Topology", "NUMA binding", "Workers", "Quit")
    tmux.wait_for("8 GPUs", "GPU7", "llama-70b")
    tmux.keys("?")
    tmux.wait_for("amdtop keys")
    tmux.keys("Escape")
    # Wait: a key right after ESC would arrive as alt+key.
    tmux.wait_without("amdtop keys")
    tmux.keys("5", "s")
    tmux.wait_for("Stop worker llama-70b?")
    tmux.keys("n")
    tmux.wait_without("Stop worker")
    pid = tmux.pid()
    tmux.keys("q")
    assert gone(pid), "amdtop still running after q"


def demo_worker_pids(state: Path) -> list[int]:
    """Live simulated servers writing their log under this test's state dir (the demo workers amdtop launched)."""
    found = []
    for pid in list_pids():
        if "amdtop.simserver" not in " ".join(read_cmdline(pid)):
            continue
        try:
            stdout = os.readlink(f"/proc/{pid}/fd/1")
        except OSError:  # exited meanwhile
            continue
        if stdout.startswith(str(state)):
            found.append(pid)
    return found


@pytest.mark.parametrize("block_sighup", [False, True], ids=["sighup", "sighup-blocked"])
def test_terminal_going_away_ends_amdtop(tmux: Tmux, block_sighup: bool) -> None:
    tmux.block_sighup = block_sighup
    tmux.start(80, 24)
    tmux.wait_for("GPUs")
    # A deadline, not a timing claim: run-tests starts three vLLM servers in the serial step's idle half of the CPU,
    # and the demo's three simulated servers took over 20 s to come up beside them once (session 21).
    deadline = time.monotonic() + 60
    while not demo_worker_pids(tmux.tmp / "state") and time.monotonic() < deadline:
        time.sleep(0.2)
    assert demo_worker_pids(tmux.tmp / "state"), "the demo did not launch its simulated workers"
    pid = tmux.pid()
    tmux.kill()  # the pty closes, as on an SSH drop
    assert gone(pid), "amdtop kept running after its terminal went away"
    # The simulated workers it launched go with it (real workers would stay: they must survive an SSH drop).
    deadline = time.monotonic() + 15
    while demo_worker_pids(tmux.tmp / "state") and time.monotonic() < deadline:
        time.sleep(0.2)
    assert demo_worker_pids(tmux.tmp / "state") == []


def path_without(tmp: Path, *tools: str) -> str:
    """A PATH holding every command of this PATH but ``tools`` (links in one folder), as on a host without them."""
    bin_dir = tmp / "bin"
    bin_dir.mkdir()
    for folder in os.environ.get("PATH", os.defpath).split(os.pathsep):
        try:
            entries = list(Path(folder).iterdir())
        except OSError:
            continue
        for entry in entries:
            link = bin_dir / entry.name
            if entry.name not in tools and not link.exists() and os.access(entry, os.X_OK):
                link.symlink_to(entry)
    return str(bin_dir)


@pytest.mark.skipif(not Path("/sys/devices/system/node/node0").is_dir(), reason="host lists no NUMA node")
def test_demo_without_numactl_runs_every_worker_unpinned(tmux: Tmux) -> None:
    path = path_without(tmux.tmp, "numactl")
    assert shutil.which("numactl", path=path) is None
    tmux.start(200, 50, path=path)
    # The banner says once what was not pinned and why; every worker still comes up.
    screen = tmux.wait_for("demo workers run unpinned", "numactl is not installed")
    screen = tmux.wait_for("llama-70b", "qwen-32b", "mistral-7b")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        rows = [line for line in screen.splitlines() if any(n in line for n in ("llama-70b ", "qwen-32b ", "mistral-7b "))]
        ready = {n for n in ("llama-70b", "qwen-32b", "mistral-7b") for line in rows if n in line and "ready" in line}
        if len(ready) == 3:
            break
        time.sleep(0.5)
        screen = tmux.screen()
    assert len(ready) == 3, screen
    assert "✗" not in screen, screen  # no launch failed


def test_cropped_partial_updates_leave_the_screen_right(tmux: Tmux) -> None:
    # tui/tty_crop.py sends only the changed cells of each update, and nothing of a line that came out the same
    # (its shadow of the screen): after 16 ticks of them, the terminal must show what a full repaint of the same
    # (paused) frame shows, text and colours.
    tmux.start(200, 50)
    tmux.wait_for("GPU history", "llama-70b")
    deadline = time.monotonic() + 20
    while "ready" not in tmux.screen() and time.monotonic() < deadline:
        time.sleep(0.5)
    time.sleep(8)  # 16 ticks at --interval 0.5 of partial updates
    tmux.keys("p")
    tmux.wait_for("refresh paused")
    tmux.wait_without("refresh paused")  # the toast's own repaints are done
    time.sleep(0.5)
    partial = tmux.screen(styles=True).splitlines()
    tmux.run("resize-window", "-t", "t", "-x", "201")
    time.sleep(1.0)
    tmux.run("resize-window", "-t", "t", "-x", "200")
    time.sleep(1.5)
    full = tmux.screen(styles=True).splitlines()
    diff = [(i, a, b) for i, (a, b) in enumerate(zip(partial, full, strict=False)) if a != b]
    assert not diff, "\n".join(f"row {i}:\n  partial {a!r}\n  full    {b!r}" for i, a, b in diff[:6])


def test_sigterm_stops_the_demo_workers(tmux: Tmux) -> None:
    tmux.start(80, 24)
    tmux.wait_for("GPUs")
    deadline = time.monotonic() + 20
    while len(demo_worker_pids(tmux.tmp / "state")) < 3 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert demo_worker_pids(tmux.tmp / "state"), "the demo did not launch its simulated workers"
    pid = tmux.pid()
    os.kill(pid, signal.SIGTERM)
    if not gone(pid, 20):
        state = Path(f"/proc/{pid}/status").read_text() if Path(f"/proc/{pid}/status").exists() else "gone"
        threads = [
            (t.name, (t / "wchan").read_text(), (t / "comm").read_text().strip())
            for t in Path(f"/proc/{pid}/task").iterdir()
        ] if Path(f"/proc/{pid}/task").exists() else []
        raise AssertionError(f"amdtop kept running after SIGTERM: {state}\n{threads}\n{tmux.screen()}")
    deadline = time.monotonic() + 15
    while demo_worker_pids(tmux.tmp / "state") and time.monotonic() < deadline:
        time.sleep(0.2)
    assert demo_worker_pids(tmux.tmp / "state") == []  # their ports are free for the next demo
