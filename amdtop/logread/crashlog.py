"""What a crashed worker's log says went wrong: the error line (not the log's last line) and the rank that died."""

from __future__ import annotations

import re
import signal
from collections.abc import Sequence
from dataclasses import dataclass

from amdtop.logread.rccl.grammar import SIGNAL_OF, signal_line

# vLLM prefixes each line of its processes with ``(APIServer pid=N) `` (``(EngineCore_DP0 pid=N)``, ``(Worker_TP1
# pid=N)``); docker compose adds ``service  | ``. Tracebacks are recognised after these are taken off.
_PREFIX = re.compile(r"^(?:[\w.-]+\s+\|\s?)?(?:\([\w.:-]+ pid=\d+(?:, ip=[\d.]+)?\)\s?)?")
_LEVEL = re.compile(r"^(?:ERROR|CRITICAL)\s+\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? \[[^\]]*\]\s?")
# ``ValidationError:``, ``RuntimeError``, ``EngineDeadError``, ``torch.OutOfMemoryError``, ``...Exception``,
# ``ERROR`` (vLLM's log level), ``Error:`` at the start of a line. Lower-case ``error`` (``errors.pydantic.dev``,
# ``0 errors``) is prose, not a verdict.
_ERROR_WORD = re.compile(r"(?:\b|(?<=[a-z0-9_]))(?:Error|Exception)\b|\bERROR\b|\bFATAL\b")
_TRACEBACK = "Traceback (most recent call last):"
# vLLM's MultiprocWorkerMonitor: ``Worker proc VllmWorker-1 died unexpectedly (exit code: -9), shutting down executor.``
# (the exit code since PR #38641; older releases print no code).
_DIED = re.compile(r"Worker proc \w+?-(\d+) died unexpectedly(?: \(exit code: (-?\d+|None)\))?")
_NOISE = ("For further information visit",)


@dataclass(frozen=True, slots=True)
class RankDeath:
    """A rank the log says died."""

    rank: int
    """TP rank (the ``VllmWorker-<rank>`` process name)."""
    exit_code: int | None
    """Its exit code (negative: the signal that killed it); ``None`` where the log does not say."""
    line: str
    """The log line, prefix and all."""
    signal_line: str | None = None
    """Where vLLM did not log the code (``exit code: None``: it logs before it collects the rank): the line a dying
    process's handler printed just above (tvm_ffi's ``Segfault encountered``, faulthandler's ``Fatal Python error``)."""

    @property
    def signal_name(self) -> str | None:
        """``SIGKILL`` for exit code -9, or the signal the handler's line above names where the code was not logged;
        ``None`` when it exited on its own or nothing says."""
        if self.exit_code is None:
            return None if self.signal_line is None else _signal_in(self.signal_line)
        if self.exit_code >= 0:
            return None
        try:
            return signal.Signals(-self.exit_code).name
        except ValueError:
            return f"signal {-self.exit_code}"

    def describe(self) -> str:
        """``rank 1 died (killed by SIGKILL)``."""
        sig = self.signal_name
        if sig is not None:
            how = f"killed by {sig}"
        elif self.exit_code is not None:
            how = f"exit code {self.exit_code}"
        else:
            how = "exit code not logged"
        return f"rank {self.rank} died ({how})"


def _body(line: str) -> str:
    """The line without vLLM's process prefix and an ``ERROR mm-dd hh:mm:ss [file.py:n]`` head."""
    rest = _PREFIX.sub("", line, count=1)
    return _LEVEL.sub("", rest, count=1)


def error_line(lines: Sequence[str]) -> str | None:
    """The line that says what went wrong: the last line naming an Error/Exception (or vLLM's ``ERROR`` level) or
    ending a Python traceback, with the indented lines that explain it (pydantic's ``Value error, ...``) joined on;
    ``None`` when no line does. Links to documentation that follow an error are not the error."""
    best: int | None = None
    in_tb = False
    bodies = [_body(line).rstrip() for line in lines]
    for i, body in enumerate(bodies):
        if body.startswith(_TRACEBACK):
            in_tb = True
            continue
        if in_tb and body and not body[0].isspace():
            in_tb = False
            best = i  # the exception line closing a traceback, whatever it is called (KeyboardInterrupt, SystemExit)
            continue
        if not in_tb and _ERROR_WORD.search(body) and not any(n in body for n in _NOISE):
            best = i
    if best is None:
        return None
    out = bodies[best].strip()
    for body in bodies[best + 1 : best + 3]:
        if not body[:1].isspace() or any(n in body for n in _NOISE):
            break
        out += " / " + body.strip()
    return out


# How far above vLLM's "died" line a handler's line is read as that rank's: the handler prints, the process dies, the
# executor's monitor notices within its poll (the capture has 7 lines of native stack between them). The frames of the
# handler's own backtrace do not count: tvm_ffi prints the whole native and Python stack, 153 and 218 lines in two
# runs here, and a window of lines missed the handler's line above them.
_SIGNAL_WINDOW = 40
_FRAME = re.compile(r'^\s+File "')


def _signal_in(line: str) -> str | None:
    m = signal_line(line)  # the catalog's pytorch.signal.* entries
    if m is None:
        return None
    return m.field("sig") or SIGNAL_OF.get(m.field("what") or "", "SIGSEGV")


def _above(lines: Sequence[str], i: int) -> list[str]:
    """The lines above ``lines[i]``, back to the :data:`_SIGNAL_WINDOW`-th that is no backtrace frame."""
    start, counted = i, 0
    while start > 0 and counted < _SIGNAL_WINDOW:
        start -= 1
        if not _FRAME.match(lines[start]):
            counted += 1
    return list(lines[start:i])


def rank_death(lines: Sequence[str]) -> RankDeath | None:
    """The last rank the log says died unexpectedly, with its exit code; where the code was not logged, the signal a
    handler printed just above it (only one rank died: a second died line in that window makes it ambiguous)."""
    for i in range(len(lines) - 1, -1, -1):
        m = _DIED.search(lines[i])
        if m is None:
            continue
        code = m.group(2)
        exit_code = None if code in (None, "None") else int(code)
        signal_line = None
        if exit_code is None:
            window = _above(lines, i)
            if not any(_DIED.search(x) for x in window):
                signal_line = next((x.strip() for x in reversed(window) if _signal_in(x)), None)
        return RankDeath(int(m.group(1)), exit_code, lines[i].strip(), signal_line)
    return None


def crash_summary(lines: Sequence[str]) -> str | None:
    """One line for a crashed worker: the rank that died and how, else the error line, else ``None``."""
    death = rank_death(lines)
    if death is not None:
        return f"{death.describe()}: {_body(death.line).strip()}"
    return error_line(lines)
