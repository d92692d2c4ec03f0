"""Log lines as the tail hands them to the UI, and their level."""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import NamedTuple, overload

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


class LineRun(NamedTuple):
    """Consecutive lines of one file, as the follower read them in one poll."""

    worker: str
    """Worker (profile) the lines came from."""
    file: str
    """Path of the file they were read from."""
    texts: tuple[str, ...]
    """The lines without their newlines (binary junk replaced), oldest first."""


class LogLines(Sequence[LogLine]):
    """One poll's lines, held as per-file runs of texts: a :class:`LogLine` (with its level and transport mark) is
    built only when it is read. The parser reads the runs' texts and needs neither; a pane that keeps the last few
    thousand lines reads only those (``lines[-n:]``), so a flood of 100k lines costs no 100k objects and levels."""

    __slots__ = ("_ends", "runs")

    def __init__(self, runs: Iterable[LineRun] = ()) -> None:
        self.runs = tuple(run for run in runs if run.texts)
        ends, n = [], 0
        for run in self.runs:
            n += len(run.texts)
            ends.append(n)
        self._ends = ends

    def __len__(self) -> int:
        return self._ends[-1] if self._ends else 0

    @overload
    def __getitem__(self, index: int) -> LogLine: ...

    @overload
    def __getitem__(self, index: slice) -> LogLines: ...

    def __getitem__(self, index: int | slice) -> LogLine | LogLines:
        n = len(self)
        if isinstance(index, slice):
            start, stop, step = index.indices(n)
            if step != 1:
                raise ValueError("LogLines slices take no step")
            return self._slice(start, max(start, stop))
        if index < 0:
            index += n
        if not 0 <= index < n:
            raise IndexError("LogLines index out of range")
        k = bisect_right(self._ends, index)
        run = self.runs[k]
        return log_line(run.worker, run.file, run.texts[index - self._ends[k] + len(run.texts)])

    def _slice(self, start: int, stop: int) -> LogLines:
        out = []
        for run, end in zip(self.runs, self._ends, strict=True):
            begin = end - len(run.texts)
            if end <= start or begin >= stop:
                continue
            a, b = max(start, begin) - begin, min(stop, end) - begin
            out.append(run if (a, b) == (0, len(run.texts)) else LineRun(run.worker, run.file, run.texts[a:b]))
        return LogLines(out)

    def __iter__(self) -> Iterator[LogLine]:
        for worker, file, texts in self.runs:
            for text in texts:
                yield log_line(worker, file, text)

    def __reversed__(self) -> Iterator[LogLine]:
        for worker, file, texts in reversed(self.runs):
            for text in reversed(texts):
                yield log_line(worker, file, text)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, LogLines):
            return self.runs == other.runs or tuple(self) == tuple(other)
        return isinstance(other, Sequence) and tuple(self) == tuple(other)

    def __hash__(self) -> int:
        return hash(tuple(self))

    def __repr__(self) -> str:
        return f"LogLines({len(self)} lines in {len(self.runs)} runs)"

    def __reduce__(self) -> tuple[type[LogLines], tuple[tuple[LineRun, ...]]]:
        return (LogLines, (self.runs,))

    def workers(self) -> list[str]:
        """Workers of these lines, in order of first appearance (without building the lines)."""
        return list(dict.fromkeys(run.worker for run in self.runs))


@dataclass(frozen=True, slots=True)
class LogBatch:
    """What one :meth:`LogFollower.poll` returns."""

    lines: Sequence[LogLine]
    """New complete lines, oldest first (the follower hands :class:`LogLines`: built as they are read)."""
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


def log_line(worker: str, file: str, text: str) -> LogLine:
    """A :class:`LogLine` with its level and transport mark, of a line read from a worker's log."""
    return LogLine(worker, file, text, classify(text), is_transport_line(text))


def make_line(worker: str, file: str, text: str) -> LogLine:
    """Build a :class:`LogLine` with its level and transport mark filled in."""
    text = mask_log_line(text)  # a worker echoes its own argv (``non-default args: {...}``): never show its keys
    return LogLine(worker, file, text, classify(text), is_transport_line(text))
