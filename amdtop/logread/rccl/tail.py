"""``tail -F`` over several log files, non-blocking, with a cap so a flood turns into a dropped-lines count.

A container runtime's log file (:mod:`amdtop.logread.rccl.container_log`) is decoded to the container's own lines as it is
read, and a journal address (:mod:`amdtop.logread.rccl.journal`) is followed through ``journalctl -f``, under the same bounds.

Semantics per file: rotation by rename (the old file is drained, then the new one is read from its start), truncation
(read again from 0), a file that appears later (read from 0), a partial last line held until its newline, binary junk
decoded with replacement characters. :meth:`LogFollower.poll` never blocks and never raises on file trouble.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import BinaryIO

from amdtop.logread.kernel.sources import JournalSource, SourceUnavailable
from amdtop.logread.rccl.container_log import ContainerLogDecoder, log_format
from amdtop.logread.rccl.journal import is_journal, open_journal
from amdtop.logread.rccl.lines import ERROR, WARN, LineRun, LogBatch, LogLines, classify

PathSpec = Path | str | tuple[str, Path | str]
"""A path (worker = file stem) or ``(worker, path)``."""

_CHUNK = 1 << 20
_MAX_PARTIAL = 1 << 20
# control bytes (not tab, not newline) shown as "?": mapped on the bytes, before decoding (an ASCII byte is never part
# of a UTF-8 sequence, so this equals mapping the characters after it, and bytes.translate is ~20x a regex scan)
_CONTROL = bytes(63 if c < 32 and c not in (9, 10) else c for c in range(256))
# lines worth keeping even when a flood is dropped to counting: errors must never be lost in the noise
_KEEP = (
    b" NCCL WARN ",
    b"NCCL Error",
    b"Watchdog caught",
    b"unhandled system error",
    b"unhandled cuda error",
    b"DistBackendError",
    b"Init COMPLETE",
)
_MAX_KEEP = 200


def _important(buf: bytes, limit: int = _MAX_KEEP) -> list[bytes]:
    """Whole lines of ``buf`` holding an error/warning mark, in order (``bytes.find`` only: cheap on MBs)."""
    found: dict[int, bytes] = {}
    for mark in _KEEP:
        i = buf.find(mark)
        while i >= 0 and len(found) < limit:
            start = buf.rfind(b"\n", 0, i) + 1
            end = buf.find(b"\n", i)
            end = len(buf) if end < 0 else end
            found[start] = buf[start:end]
            i = buf.find(mark, end)
    return [found[k] for k in sorted(found)]


class _Tail:
    __slots__ = (
        "broken", "decoder", "fh", "ident", "journal", "kept", "partial", "path", "pos", "seen", "skipped", "stream",
        "worker",
    )  # fmt: skip

    def __init__(self, worker: str, path: Path) -> None:
        self.worker, self.path = worker, path
        fmt = log_format(path)
        self.decoder = ContainerLogDecoder(fmt) if fmt else None
        self.journal = is_journal(str(path))
        self.stream: JournalSource | None = None
        self.broken = False
        """A journal that could not start or has exited: not started again while its address is wanted."""
        self.fh: BinaryIO | None = None
        self.ident: tuple[int, int] | None = None
        self.pos = 0
        self.partial = b""
        self.seen = False
        self.kept: list[bytes] = []
        self.skipped = 0

    def close(self) -> None:
        if self.fh is not None:
            self.fh.close()
        self.fh, self.ident, self.pos, self.partial = None, None, 0, b""

    def end(self) -> None:
        """Close for good: the file, and the journal's journalctl (stopped and reaped)."""
        self.close()
        if self.stream is not None:
            self.stream.close()
            self.stream = None


class LogFollower:
    """Follow log files; call :meth:`poll` from a timer or a thread (one caller at a time).

    Args:
        paths: paths or ``(worker, path)`` pairs, or a callable returning them (called on every poll, so files of
            ranks that start later are picked up).
        max_lines: most lines handed over per poll; older ones are dropped and counted.
        max_bytes: most bytes decoded per poll and file; a file further behind skips ahead, counting the lines.
        backlog_bytes: for files that exist at the first poll, start this far from their end (0: from the end).
    """

    def __init__(
        self,
        paths: Sequence[PathSpec] | Callable[[], Sequence[PathSpec]],
        *,
        max_lines: int = 5000,
        max_bytes: int = 4 << 20,
        backlog_bytes: int = 256 << 10,
    ) -> None:
        self._source = paths
        self.max_lines, self.max_bytes, self.backlog_bytes = max_lines, max_bytes, backlog_bytes
        self._tails: dict[Path, _Tail] = {}
        self._first = True
        self.dropped_total = 0

    def _specs(self) -> list[tuple[str, Path]]:
        raw = self._source() if callable(self._source) else self._source
        out = []
        for spec in raw:
            if isinstance(spec, tuple):
                out.append((spec[0], Path(spec[1])))
            else:
                out.append((Path(spec).stem, Path(spec)))
        return out

    def poll(self) -> LogBatch:
        """New complete lines of every file since the last call, and how many were dropped."""
        try:
            specs = self._specs()
        except Exception:  # a broken provider must not stop the tail
            specs = [(t.worker, p) for p, t in self._tails.items()]
        runs: list[LineRun] = []
        total = dropped = 0
        wanted = {p for _w, p in specs}
        for path in [p for p in self._tails if p not in wanted]:
            self._tails.pop(path).end()
        for worker, path in specs:
            tail = self._tails.get(path)
            if tail is None:
                tail = self._tails[path] = _Tail(worker, path)
            run, lost = self._read(tail)
            if run is not None:
                runs.append(run)
                total += len(run.texts)
            dropped += lost
        self._first = False
        if total > self.max_lines:
            runs, lost = _cut(runs, total - self.max_lines)
            dropped += lost
        self.dropped_total += dropped
        return LogBatch(LogLines(runs), dropped)

    def skipped_heads(self) -> list[tuple[str, Path, int]]:
        """``(worker, path, bytes)`` for files whose start was skipped (opened at the backlog window) and not yet
        reported; each file is reported once, so a consumer can parse the head (communicator init) itself."""
        out = []
        for path, tail in self._tails.items():
            if tail.skipped:
                out.append((tail.worker, path, tail.skipped))
                tail.skipped = 0
        return out

    def close(self) -> None:
        """Close every file."""
        for tail in self._tails.values():
            tail.end()
        self._tails.clear()

    # -- one file ----------------------------------------------------------------------------------------------
    def _open(self, tail: _Tail, st: os.stat_result, from_start: bool) -> None:
        tail.close()
        try:
            fh = open(tail.path, "rb")  # noqa: SIM115 - kept open across polls on purpose (tail -F)
        except OSError:
            return
        tail.fh, tail.ident = fh, (st.st_dev, st.st_ino)
        if not from_start and self.backlog_bytes >= 0 and st.st_size > self.backlog_bytes:
            fh.seek(st.st_size - self.backlog_bytes)
            fh.readline()  # drop the cut line
        tail.pos = fh.tell()
        tail.skipped = tail.pos  # bytes before the backlog window, never handed over

    def _read_journal(self, tail: _Tail) -> tuple[LineRun | None, int]:
        """What journalctl printed since the last poll (at most ``max_bytes``: journalctl waits on the pipe for the
        rest). journalctl that cannot start or exits is not started again (the found reader's note says why)."""
        if tail.stream is None and not tail.broken:
            try:
                tail.stream = open_journal(str(tail.path))
            except SourceUnavailable:
                tail.broken = True
        data = b""
        if tail.stream is not None:
            try:
                data = tail.stream.read_bytes(self.max_bytes)
            except OSError:
                tail.broken = True
                tail.stream.close()
                tail.stream = None
        return self._split(tail, data, 0)

    def _read(self, tail: _Tail) -> tuple[LineRun | None, int]:
        if tail.journal:
            return self._read_journal(tail)
        try:
            st = os.stat(tail.path)
        except OSError:
            st = None
        data = b""
        dropped = 0
        if tail.fh is not None and st is not None and (st.st_dev, st.st_ino) != tail.ident:
            # rotated by rename: drain the old file, then start the new one from its beginning
            more, lost = self._drain(tail)
            data, dropped = more, lost
            tail.close()
        elif tail.fh is not None and st is not None and st.st_size < tail.pos:
            tail.fh.seek(0)
            tail.pos, tail.partial = 0, b""
        if tail.fh is None and st is not None:
            self._open(tail, st, from_start=tail.seen or not self._first)
        tail.seen = True
        if tail.fh is not None:
            more, lost = self._drain(tail)
            data += more
            dropped += lost
        return self._split(tail, data, dropped)

    def _drain(self, tail: _Tail) -> tuple[bytes, int]:
        assert tail.fh is not None
        dropped = 0
        try:
            size = os.fstat(tail.fh.fileno()).st_size
            behind = size - tail.pos
            if behind > self.max_bytes:
                # the consumer cannot keep up: count the lines we skip instead of decoding them
                skip_to = size - self.max_bytes
                while tail.pos < skip_to:
                    chunk = tail.fh.read(min(_CHUNK, skip_to - tail.pos))
                    if not chunk:
                        break
                    dropped += chunk.count(b"\n")
                    tail.pos += len(chunk)
                    if len(tail.kept) < _MAX_KEEP:
                        tail.kept += _important(chunk, _MAX_KEEP - len(tail.kept))
                tail.partial = b""
                rest = tail.fh.readline()
                tail.pos += len(rest)
                dropped += 1 if rest.endswith(b"\n") else 0
            data = tail.fh.read(self.max_bytes)
        except OSError:
            return b"", dropped
        tail.pos += len(data)
        return data, dropped

    def _split(self, tail: _Tail, data: bytes, dropped: int) -> tuple[LineRun | None, int]:
        kept, tail.kept = tail.kept, []
        if not data and not kept:
            return None, dropped
        buf = tail.partial + data if tail.partial else data
        end = buf.rfind(b"\n")
        body, tail.partial = (buf[:end], buf[end + 1 :]) if end >= 0 else (b"", buf)
        # a body shorter than max_lines bytes has fewer lines: count only where a flood is possible
        flood = end >= 0 and len(body) >= self.max_lines and body.count(b"\n") + 1 > self.max_lines
        extra: list[bytes] = []
        if len(tail.partial) > _MAX_PARTIAL:
            # a newline-free flood: hand it over cut, rather than hold MBs
            extra.append(tail.partial[:_MAX_PARTIAL])
            tail.partial = b""
        if flood or kept or extra:
            # the rare path (a flood to cut, kept lines, a cut partial): work on the lines one by one
            parts = (body.split(b"\n") if end >= 0 else []) + extra
            if len(parts) > self.max_lines:
                cut = len(parts) - self.max_lines
                kept += _important(b"\n".join(parts[:cut]), _MAX_KEEP - len(kept))
                dropped += cut
                parts = parts[cut:]
            if kept:
                dropped -= len(kept)
                parts = kept + parts
            if not parts:
                return None, dropped
            body = b"\n".join(parts)
        elif end < 0:
            return None, dropped
        # one CR fix, one control-character mapping and one decode for the whole run (a newline byte is never inside a
        # UTF-8 sequence, so the split agrees with the lines); levels and transport marks are left to whoever reads
        # a line (LogLines), so the parser's texts cost no per-line work here
        if b"\r" in body:
            body = body.replace(b"\r\n", b"\n")
            if body.endswith(b"\r"):
                body = body[:-1]
        whole = body.translate(_CONTROL).decode("utf-8", "replace")
        texts: Sequence[str] = whole.split("\n")
        if tail.decoder is not None:
            # a runtime's log: its records decoded to the container's lines (partial ones joined) before anyone reads
            texts = tail.decoder.feed(texts)
            if not texts:
                return None, dropped
        return LineRun(tail.worker, str(tail.path), tuple(texts)), dropped


def _cut(runs: list[LineRun], cut: int) -> tuple[list[LineRun], int]:
    """Drop the oldest ``cut`` lines of ``runs`` (more than a poll hands over), keeping their errors and warnings
    (the last :data:`_MAX_KEEP`) in front. Returns the runs and how many lines were dropped."""
    kept: list[tuple[str, str, str]] = []
    rest: list[LineRun] = []
    left = cut
    for run in runs:
        head, tail = run.texts[:left], run.texts[left:]
        left -= len(head)
        kept += [(run.worker, run.file, t) for t in head if classify(t) in (ERROR, WARN)]
        if tail:
            rest.append(LineRun(run.worker, run.file, tail))
    kept = kept[-_MAX_KEEP:]
    front: list[LineRun] = []
    for worker, file, text in kept:
        if front and front[-1].worker == worker and front[-1].file == file:
            front[-1] = LineRun(worker, file, (*front[-1].texts, text))
        else:
            front.append(LineRun(worker, file, (text,)))
    return front + rest, cut - len(kept)
