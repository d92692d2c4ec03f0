"""Errors that end a command with a one-line message and a contract exit status."""

from __future__ import annotations


class AmdtopError(Exception):
    """A runtime failure: exit status 1, one line on stderr."""

    exit_code = 1


class InputError(AmdtopError):
    """Bad input (usage, config, validation): exit status 2."""

    exit_code = 2


class BackendUnavailable(AmdtopError):
    """A telemetry backend cannot run on this machine (library missing, no device)."""


class NoGpuFound(AmdtopError):
    """``--backend auto`` found no GPU through any backend."""


def os_reason(exc: OSError) -> str:
    """A short, plain reason for a failed file operation; a full disk is always called "disk full"."""
    import errno

    names = {
        errno.ENOSPC: "disk full",
        errno.EDQUOT: "disk full (quota exceeded)",
        errno.EROFS: "read-only file system",
        errno.EACCES: "permission denied",
        errno.EPERM: "operation not permitted",
        errno.ENOTDIR: "a parent is not a directory",
        errno.EISDIR: "is a directory",
        errno.ENOENT: "no such file or directory",
    }
    return names.get(exc.errno or 0, exc.strerror or type(exc).__name__)
