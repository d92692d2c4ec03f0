"""Where kernel lines come from: ``/dev/kmsg`` (from where it is at start), ``journalctl -k -f``, or a file
(``--kernel-log``: from its start, then followed). Every source is non-blocking: :meth:`read` returns the complete
lines that arrived since the last call and never waits.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import stat
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from amdtop.errors import os_reason

KMSG = Path("/dev/kmsg")
_CHUNK = 1 << 16
_MAX_READ = 64 << 20
"""At most this many bytes per :meth:`read` (a huge file is read over several polls, not in one frozen tick)."""


class KernelSource(Protocol):
    """A stream of kernel lines."""

    name: str
    """What it reads, for the status (``/dev/kmsg``, ``journalctl -k``, the file's path)."""

    def read(self) -> list[str]:
        """The complete lines that arrived since the last call (``OSError`` when the source broke)."""
        ...

    def close(self) -> None:
        """Release the file or process."""
        ...


class SourceUnavailable(Exception):
    """No kernel log can be read here (the message says why, one line)."""


def _lines(buf: bytes) -> tuple[list[str], bytes]:
    head, sep, tail = buf.rpartition(b"\n")
    if not sep:
        return [], buf
    return head.decode("utf-8", "replace").split("\n"), tail


class FileSource:
    """A log file read from its start and followed as it grows; a truncated or replaced file is read anew."""

    def __init__(self, path: Path) -> None:
        """Open ``path`` (``SourceUnavailable`` when it is missing, a directory or unreadable)."""
        self.name = str(path)
        self.path = path
        self._buf = b""
        try:
            self._fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError as exc:
            raise SourceUnavailable(f"{path}: {os_reason(exc)}") from None
        st = os.fstat(self._fd)
        if not stat.S_ISREG(st.st_mode):
            os.close(self._fd)
            reason = "is a directory" if stat.S_ISDIR(st.st_mode) else "is not a regular file"
            raise SourceUnavailable(f"{path}: {reason}")
        self._ino = st.st_ino
        self._pos = 0

    def _reopen_if_replaced(self) -> None:
        try:
            st = os.stat(self.path)
        except OSError:
            return  # gone for now (rotation in progress): keep what is open
        if st.st_ino != self._ino:
            try:
                fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
            except OSError:
                return
            os.close(self._fd)
            self._fd, self._ino, self._pos, self._buf = fd, st.st_ino, 0, b""
        elif st.st_size < self._pos:  # truncated in place: start over
            self._pos, self._buf = 0, b""

    def read(self) -> list[str]:
        """New complete lines."""
        self._reopen_if_replaced()
        chunks: list[bytes] = []
        total = 0
        while total < _MAX_READ:
            data = os.pread(self._fd, _CHUNK, self._pos)
            if not data:
                break
            chunks.append(data)
            self._pos += len(data)
            total += len(data)
        if not chunks:
            return []
        lines, self._buf = _lines(self._buf + b"".join(chunks))
        return lines

    def close(self) -> None:
        """Close the file."""
        os.close(self._fd)


_ESCAPE = re.compile(r"\\x([0-9a-f]{2})")


def kmsg_message(record: str) -> list[str]:
    """The message lines of one ``/dev/kmsg`` record: the ``prio,seq,usec,flags;`` header and the `` KEY=value``
    dictionary lines dropped, the kernel's ``\\xNN`` escapes undone (a multi-line printk is one record whose
    newlines arrive as ``\\x0a``)."""
    out: list[str] = []
    for part in record.split("\n"):
        if not part or part.startswith(" "):
            continue
        head, sep, message = part.partition(";")
        text = message if sep else part
        if "\\x" in text:
            text = _ESCAPE.sub(lambda m: chr(int(m.group(1), 16)), text)
        fields = head.split(",") if sep else ()
        if len(fields) >= 3 and fields[2].isdigit():
            # the record's microseconds since boot, as dmesg prints them: the monitor dates the line by them
            stamp = f"[{int(fields[2]) / 1e6:12.6f}] "
            out += [stamp + t for t in text.split("\n")]
        else:
            out += text.split("\n")
    return out


class KmsgSource:
    """``/dev/kmsg``: one record per read, ``prio,seq,usec,flags;message`` then `` KEY=value`` lines; each message
    handed on behind its ``[seconds.micros]`` stamp (the dmesg form)."""

    name = "/dev/kmsg"
    boot_clock = True
    """Line stamps are seconds since this host booted (the monitor dates them)."""

    def __init__(self, path: Path = KMSG, *, from_start: bool = False) -> None:
        """Open the device (``SourceUnavailable`` when it cannot be read: no permission, dmesg_restrict...);
        ``from_start`` reads the whole ring buffer first (``--kernel-log /dev/kmsg``)."""
        self.name = str(path)
        try:
            self._fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError as exc:
            raise SourceUnavailable(f"{path}: {os_reason(exc)}") from None
        if not from_start:
            os.lseek(self._fd, 0, os.SEEK_END)
        try:  # reading proves access (a container may open it and still refuse reads with EPERM)
            self._first = self._drain()
        except OSError as exc:
            os.close(self._fd)
            raise SourceUnavailable(f"{path}: {os_reason(exc)}") from None

    def _drain(self) -> list[str]:
        lines: list[str] = []
        while True:
            try:
                record = os.read(self._fd, 8192)
            except BlockingIOError:
                return lines
            except OSError as exc:
                if exc.errno == errno.EPIPE:  # records were overwritten before we read them: go on with the next
                    continue
                raise
            if not record:
                return lines
            lines += kmsg_message(record.decode("utf-8", "replace"))

    def read(self) -> list[str]:
        """Records logged since the last call."""
        first, self._first = self._first, []
        return first + self._drain()

    def close(self) -> None:
        """Close the device."""
        os.close(self._fd)


class JournalSource:
    """``journalctl -k -b -f -n all``: this boot's kernel messages from its start (a fault before amdtop started
    included), then followed, read without blocking; ``short-monotonic`` stamps each line with its time since boot."""

    name = "journalctl -k"
    boot_clock = True
    """Line stamps are seconds since this host booted (the monitor dates them)."""

    KERNEL_ARGS = ("-k", "-b", "-f", "-n", "all", "-o", "short-monotonic", "--no-pager", "-q")

    def __init__(self, exe: str, args: Sequence[str] = KERNEL_ARGS, name: str = "journalctl -k") -> None:
        """Start journalctl with ``args`` (the kernel's by default; the log follower passes a server's unit or pids:
        :mod:`amdtop.logread.rccl.journal`), never through a shell (``SourceUnavailable`` when it cannot start)."""
        self.name = name
        try:
            self._proc = subprocess.Popen(
                [exe, *args],
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                stdin=subprocess.DEVNULL,
            )
        except OSError as exc:
            raise SourceUnavailable(f"{name}: {os_reason(exc)}") from None
        assert self._proc.stdout is not None
        self._fd = self._proc.stdout.fileno()
        os.set_blocking(self._fd, False)
        self._buf = b""

    @property
    def pid(self) -> int:
        """journalctl's process id (the tests check it is reaped)."""
        return self._proc.pid

    def read_bytes(self, limit: int = _MAX_READ) -> bytes:
        """What journalctl printed since the last call, at most ``limit`` bytes (journalctl waits on the pipe for
        the rest: the next call reads it); ``OSError`` once journalctl has exited and everything was read."""
        chunks: list[bytes] = []
        total = 0
        while total < limit:
            try:
                data = os.read(self._fd, min(_CHUNK, limit - total))
            except BlockingIOError:
                break
            if not data:
                break
            chunks.append(data)
            total += len(data)
        if not chunks and self._proc.poll() is not None:
            raise OSError(f"exited with status {self._proc.returncode}")
        return b"".join(chunks)

    def read(self) -> list[str]:
        """Lines journalctl printed since the last call (``OSError`` once journalctl has exited)."""
        lines, self._buf = _lines(self._buf + self.read_bytes())
        return lines

    def close(self) -> None:
        """Stop journalctl (our own child, by its handle)."""
        if self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=2)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        if self._proc.stdout is not None:
            self._proc.stdout.close()


KMSG_DEVICE = (1, 11)
"""The kernel log's character device, major 1 minor 11 (Documentation/admin-guide/devices.txt)."""


def check_kmsg_device(path: Path) -> None:
    """SourceUnavailable unless the character device ``path`` is the kernel log: ``/dev/zero`` or ``/dev/urandom``
    would be read without end (a few hundred MB a second)."""
    rdev = os.stat(path).st_rdev
    if (os.major(rdev), os.minor(rdev)) != KMSG_DEVICE:
        raise SourceUnavailable(
            f"{path}: a character device other than /dev/kmsg; give a regular file, a pipe or /dev/kmsg"
        )


class PipeSource:
    """A FIFO (``--kernel-log <(journalctl -kf)`` or ``mkfifo``): what a writer sends, at most :data:`_MAX_READ`
    bytes per :meth:`read`; no writer yet, or none any more, reads as nothing new."""

    def __init__(self, path: Path) -> None:
        self.name = str(path)
        self._buf = b""
        try:
            self._fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError as exc:
            raise SourceUnavailable(f"{path}: {os_reason(exc)}") from None

    def read(self) -> list[str]:
        """New complete lines."""
        chunks: list[bytes] = []
        total = 0
        while total < _MAX_READ:
            try:
                data = os.read(self._fd, _CHUNK)
            except BlockingIOError:
                break
            if not data:
                break
            chunks.append(data)
            total += len(data)
        if not chunks:
            return []
        lines, self._buf = _lines(self._buf + b"".join(chunks))
        return lines

    def close(self) -> None:
        """Close the pipe."""
        os.close(self._fd)


def open_kernel_source(path: Path | None, *, kmsg: Path = KMSG) -> KernelSource:
    """The file ``path`` when given, else ``/dev/kmsg``, else ``journalctl -k``.

    Raises:
        SourceUnavailable: none can be read; the message names what was tried and why each failed.
    """
    if path is not None:
        try:
            if path.is_char_device():  # --kernel-log /dev/kmsg: the ring buffer from its start, then followed
                check_kmsg_device(path)
                return KmsgSource(path, from_start=True)
            if path.is_fifo():
                return PipeSource(path)
            return FileSource(path)
        except SourceUnavailable as exc:
            raise SourceUnavailable(f"--kernel-log: {exc}") from None
    reasons: list[str] = []
    try:
        # the ring buffer from its start: a fault logged before amdtop started is what the operator came for
        return KmsgSource(kmsg, from_start=True)
    except SourceUnavailable as exc:
        reasons.append(str(exc))
    exe = shutil.which("journalctl")
    if exe is None:
        reasons.append("journalctl: not found")
    else:
        try:
            return JournalSource(exe)
        except SourceUnavailable as exc:
            reasons.append(str(exc))
    raise SourceUnavailable("; ".join(reasons))
