"""Log lines as the tail hands them to the UI, and their level."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from amdtop.secrets import mask_log_line

ERROR = "error"
WARN = "warn"
INFO = "info"
OTHER = "other"

_ERROR_MARKS = (
    "NCCL Error",
    "unhandled system error",
    "unhandled cuda error",
    "Watchdog caught",
    "DistBackendError",
    "Traceback (most recent call last)",
    "terminate called",
    "[FATAL ERROR]",
)


class LogLine(NamedTuple):
    """One line of a worker's log, ready to show (a named tuple: the tail builds one per line, a frozen dataclass
    costs three times as much to build)."""

    worker: str
    """Worker (profile) the line came from."""
    file: str
    """Path of the file it was read from."""
    text: str
    """The line without its newline (binary junk replaced)."""
    level: str = INFO
    """``error``, ``warn``, ``info`` or ``other`` (see :func:`classify`)."""
    transport: bool = False
    """True for lines that name a rank pair's transport (``... via P2P/IPC``)."""


@dataclass(frozen=True, slots=True)
class LogBatch:
    """What one :meth:`LogFollower.poll` returns."""

    lines: tuple[LogLine, ...]
    """New complete lines, oldest first."""
    dropped: int = 0
    """Lines read but not handed over since the last poll because the consumer lagged."""



APP_INFO = ("INFO ", "DEBUG ")
"""Python logging prefixes of factless lines (vLLM at INFO/DEBUG level)."""


def classify(text: str) -> str:
    """Level of a raw log line: cheap substring checks, no regex."""
    if " NCCL INFO " in text:
        # most of a log: an INFO line is an error only as a return-code trail hop, whose "-> N" ends the line
        return ERROR if "-> " in text[-24:] and is_error_trail(text) else INFO
    if text.startswith(APP_INFO):
        return INFO  # vLLM / Python logging at INFO or DEBUG level: the rest of a serving log
    if "NCCL WARN" in text or " WARN " in text or text.startswith("WARNING"):
        return WARN
    if " -> " in text and "NCCL INFO" in text and is_error_trail(text):
        return ERROR
    for mark in _ERROR_MARKS:
        if mark in text:
            return ERROR
    if text.startswith(("ERROR", "CRITICAL")) or " ERROR " in text[:40]:
        return ERROR
    if "NCCL INFO" in text or text.startswith("INFO"):
        return INFO
    return OTHER


def is_error_trail(text: str) -> bool:
    """True for an error-trail hop: ``... NCCL INFO <file>.cc:<line> -> 3`` (optionally `` [Async thread]``)."""
    tail = text.rstrip()
    if tail.endswith("]"):
        tail = tail[: tail.rfind("[")].rstrip()
    head, sep, code = tail.rpartition(" -> ")
    return bool(sep) and code.isdigit() and ":" in head[-12:]


def is_transport_line(text: str) -> bool:
    """True when the line names the transport of a rank pair or a ring/tree connect."""
    return (" via " in text and "Channel" in text) or "Connected all" in text


def make_line(worker: str, file: str, text: str) -> LogLine:
    """Build a :class:`LogLine` with its level and transport mark filled in."""
    text = mask_log_line(text)  # a worker echoes its own argv (``non-default args: {...}``): never show its keys
    return LogLine(worker, file, text, classify(text), is_transport_line(text))
