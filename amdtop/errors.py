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
