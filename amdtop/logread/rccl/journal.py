"""A server's journal as a log source: ``journalctl -f -o cat`` on its unit or pids, followed like a file.

A source is named by an address string (``journalctl: _SYSTEMD_UNIT=vllm.service --since=@1733540000``), so it
travels where a log path travels (a worker's ``other_logs``) and the follower opens it as it opens a file. Only the
match and time tokens below are accepted: the address never reaches journalctl as anything but these arguments, and
never through a shell. The process is :class:`amdtop.logread.kernel.sources.JournalSource`'s (the kernel log's own
``journalctl -k -f`` follower), started with this server's arguments.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Sequence

from amdtop.logread.kernel.sources import JournalSource, SourceUnavailable

PREFIX = "journalctl:"
BACKLOG_LINES = 5000
"""Lines of the journal before following (since the server started, where known): its communicator init included for
a server up less than that many lines."""
_TOKEN = re.compile(
    r"(?:_PID=\d+|_SYSTEMD_UNIT=[\w.@:\\-]+|_SYSTEMD_USER_UNIT=[\w.@:\\-]+|CONTAINER_ID_FULL=[0-9a-f]{64}"
    r"|--since=@\d+)\Z"
)
"""The tokens an address may hold: a unit's or a process's fields (systemd.journal-fields(7)), a container's full id
(the field Docker's and podman's ``journald`` log drivers add to each line: docs.docker.com/engine/logging/drivers/
journald), and a start time (``@`` seconds since the epoch: systemd.time(7))."""


def journal_address(matches: Sequence[str], since: float | None = None) -> str:
    """The address of the journal entries ``matches`` select (``_SYSTEMD_UNIT=u`` or ``_PID=p`` tokens, ORed by
    journalctl when the field repeats), from ``since`` (seconds since the epoch) on."""
    tokens = [*matches, *([f"--since=@{int(since)}"] if since is not None else [])]
    bad = [t for t in tokens if not _TOKEN.match(t)]
    if bad or not matches:
        raise ValueError(f"journal address: bad match {bad[0] if bad else '(none)'}")
    return f"{PREFIX} {' '.join(tokens)}"


def is_journal(address: str) -> bool:
    """Whether a log path is a journal address."""
    return address.startswith(PREFIX)


def journal_args(address: str, *, follow: bool = True, lines: int = BACKLOG_LINES) -> list[str]:
    """journalctl's arguments for ``address`` (``ValueError`` when it holds anything but a match or a time)."""
    tokens = address[len(PREFIX) :].split()
    if not tokens or not all(_TOKEN.match(t) for t in tokens):
        raise ValueError(f"not a journal address: {address!r}")
    return [*(["-f"] if follow else []), "-n", str(lines), "-o", "cat", "--no-pager", "-q", *tokens]


def open_journal(address: str) -> JournalSource:
    """``journalctl -f -o cat`` on the address's matches, read without blocking (``SourceUnavailable`` when
    journalctl is not on ``PATH`` or cannot start)."""
    exe = shutil.which("journalctl")
    if exe is None:
        raise SourceUnavailable("journalctl: not found on PATH")
    try:
        args = journal_args(address)
    except ValueError as exc:
        raise SourceUnavailable(str(exc)) from None
    return JournalSource(exe, args, name=address)


def check_journal(address: str, timeout_s: float = 3.0, *, need_entry: bool = False) -> str | None:
    """``None`` when journalctl can read the address's entries, else why not, in one line (missing, failing,
    not answering; with ``need_entry``, holding none: a container whose log driver is not journald)."""
    exe = shutil.which("journalctl")
    if exe is None:
        return "journalctl is not on PATH"
    try:
        done = subprocess.run(
            [exe, *journal_args(address, follow=False, lines=1 if need_entry else 0)],
            stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout_s, check=False,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        return f"journalctl did not answer in {timeout_s:g} s"
    except (OSError, ValueError) as exc:
        return f"journalctl: {exc}"
    if done.returncode != 0:
        why = done.stderr.decode("utf-8", "replace").strip().splitlines()
        return f"journalctl exited with status {done.returncode}" + (f": {why[0][:160]}" if why else "")
    if need_entry and not done.stdout.strip():
        return "the journal holds none of its lines"
    return None


def journal_tail(address: str, lines: int = 400, timeout_s: float = 3.0) -> tuple[str, ...]:
    """The last ``lines`` entries of the address (a crashed server's last words); ``()`` when unreadable."""
    exe = shutil.which("journalctl")
    if exe is None:
        return ()
    try:
        done = subprocess.run(
            [exe, *journal_args(address, follow=False, lines=lines)],
            stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout_s, check=False,
        )  # fmt: skip
    except (subprocess.TimeoutExpired, OSError, ValueError):
        return ()
    if done.returncode != 0:
        return ()
    return tuple(done.stdout.decode("utf-8", "replace").splitlines()[-lines:])
