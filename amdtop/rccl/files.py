"""Reading log files for the parser: plain, gzip, bzip2 or xz (by magic bytes); other compressions refused by name."""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
from collections.abc import Sequence
from pathlib import Path
from typing import BinaryIO, TextIO, cast

from amdtop.errors import InputError
from amdtop.rccl import grammar as g
from amdtop.rccl.parser import LogParser
from amdtop.rccl.report import LogReport

_READ_CHARS = 1 << 22
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


def open_log(path: Path | str) -> TextIO:
    """A text stream over ``path``, decompressed where gzip/bzip2/xz; invalid bytes become U+FFFD.

    Raises:
        InputError: another compression (named, with the command that unpacks it), or an unreadable file.
    """
    name = str(path)
    try:
        with open(path, "rb") as fh:
            head = fh.read(8)
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise InputError(f"{name}: cannot read ({reason}); pass a readable RCCL/NCCL log file") from None
    for magic, (refused, tool) in _REFUSED.items():
        if head.startswith(magic):
            raise InputError(
                f"{name}: {refused}-compressed, which amdtop does not read; unpack it first ({tool} {name})"
            )
    kind = compression(head)
    if kind is None:
        return open(path, encoding="utf-8", errors="replace", newline=None)
    return io.TextIOWrapper(_decompressed(kind, path), encoding="utf-8", errors="replace", newline=None)


def _decompressed(kind: str, path: Path | str) -> BinaryIO:
    # the three stdlib files are BufferedIOBase streams; typeshed does not spell them as BinaryIO
    if kind == "gzip":
        return cast(BinaryIO, gzip.open(path, "rb"))
    if kind == "bzip2":
        return cast(BinaryIO, bz2.open(path, "rb"))
    return cast(BinaryIO, lzma.open(path, "rb"))


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
        p.feed_lines(lines, name, n)
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
        except (OSError, EOFError, lzma.LZMAError) as exc:
            reason = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
            raise InputError(f"{name}: cannot read ({reason}); pass a readable RCCL/NCCL log file") from None
    return p.report()
