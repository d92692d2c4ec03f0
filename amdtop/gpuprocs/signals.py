"""Signals for a process on a GPU: who may send one, what the confirmation says, and sending it to that process only.

TERM first; once amdtop sent TERM to a process that is still there, the next request is KILL. Refused under
``--readonly``, for amdtop's own workers (they stop through the supervisor, which stops the whole group), for a
process amdtop cannot identify, and for another user's process unless amdtop runs as root (the confirmation then
says whose process it is).
"""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass

import psutil

from amdtop.gpuprocs.rows import ProcessRow

_SAME_START_S = 0.5
"""Start times within this of each other are the same process (both come from the same kernel tick count)."""


@dataclass(frozen=True, slots=True)
class SignalPlan:
    """A signal amdtop may send once the user confirms."""

    row: ProcessRow
    """The process, as the frame showed it."""
    signum: int
    """``SIGTERM`` or ``SIGKILL``."""
    question: str
    """The confirmation: pid, user and command, and whose process it is when that is not amdtop's user."""

    @property
    def name(self) -> str:
        """``TERM`` or ``KILL``."""
        return signal.Signals(self.signum).name.removeprefix("SIG")


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why no signal may be sent; ``worker`` names the worker to stop instead, where that is the way."""

    reason: str
    """One line for the user."""
    worker: str | None = None
    """amdtop's worker the process belongs to."""


def _user_of(uid: int) -> str:
    try:
        import pwd

        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def plan_signal(
    row: ProcessRow, *, readonly: bool, euid: int, termed: frozenset[tuple[int, float | None]] = frozenset()
) -> SignalPlan | Refusal:
    """What sending a signal to ``row`` would be; ``termed`` holds (pid, start) of processes already sent TERM."""
    if readonly:
        return Refusal("read-only: signals are disabled (amdtop was started with --readonly)")
    if row.pid <= 0:
        return Refusal("this process has no pid in amdtop's PID namespace: signal it from its own container")
    if row.owner_kind == "worker":
        rank = "" if row.rank is None else f" (rank {row.rank})"
        return Refusal(f"pid {row.pid} belongs to amdtop's worker {row.owner}{rank}: stop the worker", row.owner)
    if row.pid == os.getpid():
        return Refusal("that is amdtop itself: quit with q")
    if row.uid is None or row.started_at is None:
        return Refusal(f"pid {row.pid}: amdtop cannot read who runs it (gone, or hidden by /proc's hidepid)")
    me = _user_of(euid)
    foreign_user = row.uid != euid
    if foreign_user and euid != 0:
        return Refusal(f"pid {row.pid} belongs to {row.user}; amdtop runs as {me} and only root may signal it")
    signum = signal.SIGKILL if (row.pid, row.started_at) in termed else signal.SIGTERM
    verb = "KILL (it did not exit after TERM)" if signum == signal.SIGKILL else "TERM"
    lines = [
        f"Send {verb} to pid {row.pid} of user {row.user} on GPU {row.gpu}?",
        "",
        (row.command or row.name or "?")[:400],
    ]
    if row.owner_kind == "vllm":
        lines += ["", f"It is part of the vLLM server {row.owner_label} that amdtop found running."]
    if foreign_user:
        lines += ["", f"amdtop runs as root: this signals {row.user}'s process, not one of yours."]
    return SignalPlan(row, signum, "\n".join(lines))


def send_signal(plan: SignalPlan) -> str:
    """Send the planned signal if the pid is still the process shown; the outcome as one line.

    Raises:
        ProcessLookupError: the process exited, or its pid now belongs to another process.
        PermissionError: the kernel refused.
    """
    row = plan.row
    try:
        started = psutil.Process(row.pid).create_time()
    except psutil.NoSuchProcess:
        raise ProcessLookupError(f"pid {row.pid} has exited") from None
    if row.started_at is None or abs(started - row.started_at) > _SAME_START_S:
        raise ProcessLookupError(f"pid {row.pid} is now another process: nothing sent")
    os.kill(row.pid, plan.signum)
    return f"sent {plan.name} to pid {row.pid} ({row.user})"
