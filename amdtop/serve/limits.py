"""What the serve takes from a viewer: every field checked as the CLI checks it, and a bound on each viewer's calls.

A viewer is this user's own process (:mod:`amdtop.serve.peer`), yet a broken or hostile one must cost the serve one
error reply, never a traceback, a worker's lock held for ``grace=1e9`` seconds, or gigabytes of replies queued for
a client that never reads them.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any

from amdtop.errors import InputError
from amdtop.serve.errors import WireError
from amdtop.service.api import WIRE_OPS
from amdtop.service.protocol import check_call, shown

MAX_IN_FLIGHT = 32
"""Calls of one viewer accepted and not yet written back to it: a client past this is dropped (one that sends
without reading its replies would otherwise grow the serve's queues without end)."""


def parse_hello(msg: Mapping[str, Any]) -> tuple[int, bool]:
    """The viewer's pid and read-only flag from its hello (WireError, one line, when a field is malformed)."""
    if msg.get("type") != "hello":
        raise WireError(f"expected a hello, got a message of type {shown(msg.get('type'))}")
    pid, readonly = msg.get("pid", 0), msg.get("readonly", False)
    if pid is None:
        pid = 0
    if isinstance(pid, bool) or not isinstance(pid, int) or not 0 <= pid < 2**31:
        raise WireError(f"hello: pid {shown(pid)} is not a process id")
    if not isinstance(readonly, bool):
        raise WireError(f"hello: readonly {shown(readonly)} is not true or false")
    return pid, readonly


def parse_call(msg: Mapping[str, Any]) -> tuple[str, object, tuple[Any, ...], dict[str, Any]]:
    """``(op, id, args, kwargs)`` of a call (InputError, one line, when a field has the wrong type)."""
    op, call_id = msg.get("op"), msg.get("id")
    if not isinstance(op, str) or not op or len(op) > 64:
        raise InputError(f"call: op {shown(op)} is not a request name")
    if call_id is not None and (isinstance(call_id, bool) or not isinstance(call_id, int)):
        raise InputError(f"{op}: call id {shown(call_id)} is not an integer")
    args, kwargs = msg.get("args", ()), msg.get("kwargs", {})
    if args is None:
        args = ()
    if kwargs is None:
        kwargs = {}
    if not isinstance(args, (list, tuple)):
        raise InputError(f"{op}: args must be a list, not {type(args).__name__}")
    if not isinstance(kwargs, dict) or not all(isinstance(k, str) for k in kwargs):
        raise InputError(f"{op}: kwargs must be a mapping of names, not {type(kwargs).__name__}")
    return op, call_id, tuple(args), dict(kwargs)


def check_args(op: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """``args`` and ``kwargs`` of ``op`` checked and normalised as the CLI would (InputError naming the field): a
    node service op against its declared parameters (:func:`amdtop.service.protocol.check_call`: no table of ops is
    kept here), the serve's own read (``stats``) taking none."""
    if op in WIRE_OPS:
        return check_call(op, args, kwargs)
    if args or kwargs:
        raise InputError(f"{op}: takes no arguments")
    return (), {}


class CallBudget:
    """One viewer's calls accepted and not yet answered (bounded by :data:`MAX_IN_FLIGHT`)."""

    def __init__(self, limit: int = MAX_IN_FLIGHT) -> None:
        self.limit = limit
        self._n = 0
        self._lock = threading.Lock()

    def take(self, queued_replies: int = 0) -> bool:
        """Count one more call; ``False`` (nothing counted) when this one with the replies still queued for the
        viewer would pass the bound."""
        with self._lock:
            if self._n + queued_replies >= self.limit:
                return False
            self._n += 1
            return True

    def give(self) -> None:
        """A call's reply is queued."""
        with self._lock:
            self._n -= 1

    @property
    def in_flight(self) -> int:
        return self._n


def counted(budget: CallBudget | None, call: Callable[..., None], *args: Any) -> None:
    """Run ``call(*args)`` (a call the serve answers), then give its place in ``budget`` back."""
    try:
        call(*args)
    finally:
        if budget is not None:
            budget.give()
