"""Reading log files for the parser: plain, gzip, bzip2 or xz (by magic bytes); other compressions refused by name."""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import os
import select
import stat
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any, BinaryIO, TextIO, cast

from amdtop.errors import InputError
from amdtop.logread.rccl import grammar as g
from amdtop.logread.rccl.parser import LogParser
from amdtop.logread.rccl.report import LogReport
from amdtop.logread.rccl.unwrap import untear, unwrap

_READ_CHARS = 1 << 22
FIFO_WAIT_S = 10.0
"""How long ``logs parse`` waits for the writer of a FIFO before it refuses it (never hangs)."""
# magic bytes -> (name, how to decompress it by hand)
_READABLE = {b"\x1f\x8b": "gzip", b"BZh": "bzip2", b"\xfd7zXZ\x00": "xz"}
_REFUSED = {
    b"\x28\xb5\x2f\xfd": ("zstd", "zstd -d"),
    b"\x04\x22\x4d\x18": ("lz4", "lz4 -d"),
    b"PK\x03\x04": ("zip", "unzip"),
    b"7z\xbc\xaf\x27\x1c": ("7z", "7z x"),
    b"\x89LZO": ("lzop", "lzop -d"),
}


def compression(head: bytes) -> str | None:
    """Name of the compression ``head`` (a file's first bytes) starts with, ``None`` for plain text."""
    for magic, name in _READABLE.items():
        if head.startswith(magic):
            return name
    for magic, (name, _tool) in _REFUSED.items():
        if head.startswith(magic):
            return name
    return None


def open_log(path: Path | str, fifo_wait_s: float = FIFO_WAIT_S) -> TextIO:
    """A text stream over ``path``, decompressed where gzip/bzip2/xz; invalid bytes become U+FFFD.

    The file is opened once and read as a stream (never seeked, never reopened), so pipes, ``/dev/stdin`` and
    process substitutions (``<(gzip -c a.log)``) are read whole. A FIFO is opened without blocking and waited on for
    at most ``fifo_wait_s`` seconds for its writer.

    Raises:
        InputError: another compression (named, with the command that unpacks it), an unreadable file, or a FIFO
            whose writer never came.
    """
    name = str(path)
    try:
        raw = _open_stream(path, fifo_wait_s)
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise InputError(f"{name}: cannot read ({reason}); pass a readable RCCL/NCCL log file") from None
    try:
        head = _read_head(raw, 8)
    except OSError as exc:
        raw.close()
        reason = exc.strerror or type(exc).__name__
        raise InputError(f"{name}: cannot read ({reason}); pass a readable RCCL/NCCL log file") from None
    for magic, (refused, tool) in _REFUSED.items():
        if head.startswith(magic):
            raw.close()
            raise InputError(
                f"{name}: {refused}-compressed, which amdtop does not read; unpack it first ({tool} {name})"
            )
    # the head was consumed from the stream: put it back in front, without seeking (a pipe cannot seek)
    stream = cast(BinaryIO, io.BufferedReader(_Rejoined(head, raw), buffer_size=1 << 16))
    kind = compression(head)
    if kind is not None:
        # the decompressors leave a file object they were given open: _Owning closes both
        stream = cast(BinaryIO, io.BufferedReader(_Owning(_decompressed(kind, stream), stream), buffer_size=1 << 16))
    return io.TextIOWrapper(stream, encoding="utf-8", errors="replace", newline=None)


def _open_stream(path: Path | str, fifo_wait_s: float) -> BinaryIO:
    """Open ``path`` for reading once; a FIFO without a writer is refused after ``fifo_wait_s`` instead of hanging."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        mode = 0
    if stat.S_ISCHR(mode) and not _is_terminal(path):
        # /dev/zero, /dev/urandom: read without end; /dev/kmsg: follows forever (the kernel path reads it)
        raise InputError(
            f"{path}: a character device, which never ends; give a regular file or a pipe (the kernel log: "
            "amdtop --kernel-log /dev/kmsg)"
        )
    if not stat.S_ISFIFO(mode):
        return open(path, "rb", buffering=0)
    # open(2) of a FIFO blocks until a writer opens it: open without blocking, then wait for data or hang-up
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        poller = select.poll()
        poller.register(fd, select.POLLIN | select.POLLPRI)
        if not poller.poll(max(0.0, fifo_wait_s) * 1000):
            raise InputError(
                f"{path}: a FIFO with no writer (waited {fifo_wait_s:g} s); start the program that writes it first, "
                "or pass a regular file"
            )
        os.set_blocking(fd, True)
        return cast(BinaryIO, os.fdopen(fd, "rb", buffering=0))
    except BaseException:
        os.close(fd)
        raise


def _is_terminal(path: Path | str) -> bool:
    """A terminal (``/dev/stdin`` of an interactive shell: text pasted, ended with Ctrl-D): a character device that
    does end."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    except OSError:
        return False
    try:
        return os.isatty(fd)
    finally:
        os.close(fd)


def _read_head(raw: BinaryIO, n: int) -> bytes:
    """Up to ``n`` bytes (fewer only at end of file): a pipe may hand them over in several reads."""
    head = b""
    while len(head) < n:
        got = raw.read(n - len(head))
        if not got:
            break
        head += got
    return head


class _Rejoined(io.RawIOBase):
    """``head`` followed by the rest of ``raw``: a stream whose first bytes were already read, read on unseeked."""

    def __init__(self, head: bytes, raw: BinaryIO) -> None:
        super().__init__()
        self._head = head
        self._raw = raw

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        if self._head:
            n = min(len(view), len(self._head))
            view[:n] = self._head[:n]
            self._head = self._head[n:]
            return n
        got = self._raw.read(len(view))
        if not got:
            return 0
        view[: len(got)] = got
        return len(got)

    def close(self) -> None:
        if not self.closed:
            self._raw.close()
        super().close()


class _Owning(io.RawIOBase):
    """Reads ``reader``; closing it closes ``under`` too."""

    def __init__(self, reader: BinaryIO, under: BinaryIO) -> None:
        super().__init__()
        self._reader, self._under = reader, under

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        return self._reader.readinto(buffer)  # type: ignore[attr-defined,no-any-return]

    def close(self) -> None:
        if not self.closed:
            self._reader.close()
            self._under.close()
        super().close()


def _decompressed(kind: str, stream: BinaryIO) -> BinaryIO:
    # the three stdlib readers take a file object and read it forward only; typeshed does not spell them as BinaryIO
    if kind == "gzip":
        return cast(BinaryIO, gzip.GzipFile(fileobj=stream, mode="rb"))
    if kind == "bzip2":
        return cast(BinaryIO, bz2.BZ2File(stream, "rb"))
    return cast(BinaryIO, lzma.LZMAFile(stream, "rb"))


def feed_file(p: LogParser, fh: TextIO, name: str) -> None:
    """Parse an open text stream into ``p`` in big chunks (split in C; the cut line is carried to the next chunk)."""
    p.files.add(name)
    carry = ""
    n = 1
    while True:
        chunk = fh.read(_READ_CHARS)
        if not chunk:
            break
        lines = (carry + chunk).split("\n") if carry else chunk.split("\n")
        carry = lines.pop()
        if len(carry) > g.MAX_LINE * 64:
            # a newline-free monster: count it as one unknown line and move on
            lines.append(carry[: g.MAX_LINE + 1])
            carry = ""
        p.feed_lines(unwrap(untear(lines, chunk)), name, n)  # records a terminal wrapped or another process tore
        n += len(lines)
    if carry:
        p.feed_lines([carry], name, n)


def parse_files(paths: Sequence[Path | str]) -> LogReport:
    """Parse every file (any mix of ranks, processes, hosts and dialects; gzip/bzip2/xz read) into one report.

    Raises:
        InputError: a file cannot be read or is compressed in a way amdtop does not read (the message names it).
    """
    p = LogParser()
    for path in paths:
        name = str(path)
        try:
            with open_log(path) as fh:
                feed_file(p, fh, name)
        except (OSError, EOFError, lzma.LZMAError, zlib.error) as exc:
            reason = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
            raise InputError(f"{name}: cannot read ({reason}); pass a readable RCCL/NCCL log file") from None
    return p.report()
