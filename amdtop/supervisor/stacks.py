"""Python stacks of each rank of a worker, dumped with py-spy (the ``debug`` extra).

py-spy reads another process's memory through ptrace: it needs the same user and a kernel that allows it
(``kernel.yama.ptrace_scope`` 0, or CAP_SYS_PTRACE). A rank that is stopped (state T: SIGSTOP, a debugger) cannot be
paused again, so it is read without pausing (``--nonblocking``). Nothing is ever signalled or killed here.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from amdtop.errors import AmdtopError
from amdtop.model import WorkerStatus
from amdtop.procinfo import PROC
from amdtop.supervisor.procs import read_stat

INSTALL_HINT = "install it with pip install 'amdtop[debug]' (or pip install py-spy)"
DUMP_TIMEOUT_S = 30.0
"""py-spy answers in well under a second; a rank whose memory cannot be read must not hang the dashboard."""


@dataclass(frozen=True, slots=True)
class RankStack:
    """One rank's dump: its stacks, or why there are none (one line)."""

    rank: int | None
    """TP rank (``None`` for a process that is not a rank, e.g. the API server of a worker without ranks)."""
    pid: int
    """The process dumped."""
    text: str | None
    """py-spy's dump."""
    error: str | None = None
    """Why there is no dump."""

    def label(self) -> str:
        """``rank 1 (pid 4321)``."""
        return f"pid {self.pid}" if self.rank is None else f"rank {self.rank} (pid {self.pid})"


def worker_targets(worker: WorkerStatus) -> list[tuple[int | None, int]]:
    """What a stack dump of ``worker`` covers: each rank's process, else (no rank titled yet) the launched process."""
    if worker.rank_pids:
        return [(rank, pid) for rank, pid in worker.rank_pids]
    return [(None, worker.pid)] if worker.pid else []


def find_py_spy() -> str | None:
    """py-spy on PATH, else beside this Python (a virtual environment's ``bin`` need not be on PATH)."""
    found = shutil.which("py-spy")
    if found:
        return found
    beside = Path(sys.executable).parent / "py-spy"
    return str(beside) if beside.is_file() and os.access(beside, os.X_OK) else None


def require_py_spy(py_spy: str | None = None) -> str:
    """The py-spy to run; AmdtopError with the install line when there is none."""
    exe = py_spy if py_spy is not None else find_py_spy()
    if exe is None or not (os.path.isfile(exe) and os.access(exe, os.X_OK)):
        raise AmdtopError(f"workers stacks: py-spy is not installed; {INSTALL_HINT}")
    return exe


def _first_error(stderr: str) -> str:
    """py-spy's own reason, one line (it prints the error, its causes and a Rust backtrace)."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    for line in lines:
        if line.startswith("Error:"):
            return line.removeprefix("Error:").strip()
    return lines[0] if lines else "no output"


def _gone(pid: int, proc: Path) -> bool:
    st = read_stat(pid, proc)
    return st is None or st.state in ("Z", "X")  # a zombie has no memory left to read


def _why(stack_pid: int, rc: int, stderr: str, proc: Path) -> str:
    text = stderr.lower()
    if _gone(stack_pid, proc):
        return "exited during the dump (nothing to show; nothing was killed)"
    if "permission denied" in text or "operation not permitted" in text:
        return (
            "ptrace denied: py-spy needs to run as the worker's user with ptrace allowed (kernel.yama.ptrace_scope=0 "
            "or CAP_SYS_PTRACE, e.g. sudo, or docker --cap-add SYS_PTRACE)"
        )
    return f"py-spy failed (exit {rc}): {_first_error(stderr)}"


def dump_one(
    rank: int | None, pid: int, *, py_spy: str, timeout_s: float = DUMP_TIMEOUT_S, proc: Path = PROC
) -> RankStack:
    """Dump ``pid``'s Python stacks (all threads); a failure is one line in :attr:`RankStack.error`."""
    st = read_stat(pid, proc)
    if st is None or _gone(pid, proc):
        return RankStack(rank, pid, None, "exited before the dump (nothing to show; nothing was killed)")
    argv = [py_spy, "dump", "--pid", str(pid)]
    if st.state in ("T", "t"):
        argv.append("--nonblocking")  # a stopped process cannot be paused again: py-spy would fail on waitpid
    env = {k: v for k, v in os.environ.items() if k != "RUST_BACKTRACE"}
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, env=env, check=False)
    except subprocess.TimeoutExpired:
        return RankStack(rank, pid, None, f"py-spy gave no answer in {timeout_s:g} s (the process was left as it was)")
    except OSError as exc:
        return RankStack(rank, pid, None, f"cannot run {py_spy}: {exc.strerror}")
    if done.returncode != 0 or not done.stdout.strip():
        return RankStack(rank, pid, None, _why(pid, done.returncode, done.stderr, proc))
    return RankStack(rank, pid, done.stdout.rstrip("\n"))


def dump_stacks(
    ranks: Sequence[tuple[int | None, int]],
    *,
    py_spy: str | None = None,
    timeout_s: float = DUMP_TIMEOUT_S,
    proc: Path = PROC,
) -> list[RankStack]:
    """Each ``(rank, pid)``'s stacks, in order. AmdtopError (one line) only when py-spy itself is missing."""
    exe = require_py_spy(py_spy)
    return [dump_one(rank, pid, py_spy=exe, timeout_s=timeout_s, proc=proc) for rank, pid in ranks]


def render_stacks(name: str, stacks: Sequence[RankStack]) -> str:
    """The dumps as text, one block per rank."""
    out: list[str] = []
    for s in stacks:
        out.append(f"=== {name} {s.label()}")
        out.append(s.text if s.text is not None else f"! {s.error}")
    return "\n".join(out) + "\n"
