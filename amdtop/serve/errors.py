"""The wire's one error: the peer closed, sent garbage, or speaks another version."""

from __future__ import annotations

from amdtop.errors import AmdtopError


class WireError(AmdtopError):
    """The peer closed, sent garbage, or speaks another version."""
