"""What the serve takes from a viewer: every field checked as the CLI checks it, and a bound on each viewer's calls.

A viewer is this user's own process (:mod:`amdtop.serve.peer`), yet a broken or hostile one must cost the serve one
error reply, never a traceback, a worker's lock held for ``grace=1e9`` seconds, or gigabytes of replies queued for
a client that never reads them.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Mapping
from typing import Any

from amdtop.errors import InputError
from amdtop.serve.wire import WireError

MAX_IN_FLIGHT = 32
"""Calls of one viewer accepted and not yet written back to it: a client past this is dropped (one that sends
without reading its replies would otherwise grow the serve's queues without end)."""
MAX_GRACE_S = 7 * 24 * 3600.0
"""The longest grace a stop takes: the CLI's ``--grace`` limit (a week)."""
MAX_NAME = 255


def parse_hello(msg: Mapping[str, Any]) -> tuple[int, bool]:
    """The viewer's pid and read-only flag from its hello (WireError, one line, when a field is malformed)."""
    if msg.get("type") != "hello":
        raise WireError(f"expected a hello, got a message of type {str(msg.get('type'))[:40]!r}")
    pid, readonly = msg.get("pid", 0), msg.get("readonly", False)
    if pid is None:
        pid = 0
    if isinstance(pid, bool) or not isinstance(pid, int) or not 0 <= pid < 2**31:
        raise WireError(f"hello: pid {str(pid)[:40]!r} is not a process id")
    if not isinstance(readonly, bool):
        raise WireError(f"hello: readonly {str(readonly)[:40]!r} is not true or false")
    return pid, readonly


def parse_call(msg: Mapping[str, Any]) -> tuple[str, object, tuple[Any, ...], dict[str, Any]]:
    """``(op, id, args, kwargs)`` of a call (InputError, one line, when a field has the wrong type)."""
    op, call_id = msg.get("op"), msg.get("id")
    if not isinstance(op, str) or not op or len(op) > 64:
        raise InputError(f"call: op {str(op)[:40]!r} is not a request name")
    if call_id is not None and (isinstance(call_id, bool) or not isinstance(call_id, int)):
        raise InputError(f"{op}: call id {str(call_id)[:40]!r} is not an integer")
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


def _name(op: str, value: object) -> str:
    if not isinstance(value, str) or not value or len(value) > MAX_NAME:
        raise InputError(f"{op}: {str(value)[:40]!r} is not a worker name")
    return value


def _grace(op: str, value: object) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InputError(f"{op}: grace {str(value)[:40]!r} is not a number of seconds; e.g. 30")
    if not math.isfinite(value):
        raise InputError(f"{op}: grace {value!r} is not a finite number of seconds; e.g. 30")
    if value < 0:
        raise InputError(f"{op}: grace {value:g} must be at least 0 seconds; e.g. 30")
    if value > MAX_GRACE_S:
        raise InputError(f"{op}: grace {value:g} is more than a week ({MAX_GRACE_S:g} s); give fewer seconds")
    return float(value)


def _flag(op: str, key: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise InputError(f"{op}: {key} {str(value)[:40]!r} is not true or false")
    return value


def _changes(op: str, value: object) -> dict[str, str]:
    if not isinstance(value, Mapping) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise InputError(f"{op}: changes must map KEY to VALUE text; e.g. {{'max-num-seqs': '64'}}")
    return dict(value)


_SIGNATURES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "launch": (("name",), ("force",)),
    "stop": (("name",), ("grace",)),
    "restart": (("name",), ("grace", "force")),
    "retune": (("name", "changes"), ("grace", "force")),
    "retune_diff": (("name", "changes"), ()),
    "profile": (("name",), ()),
    "ramp_abort": (("name",), ()),
    "adopt": (("name",), ()),
}
"""The worker calls' parameters: required, then optional; the other ops take none (``ramp_start`` its own four)."""


def check_args(op: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """``args`` and ``kwargs`` of ``op`` checked and normalised as the CLI would (InputError naming the field)."""
    if op == "ramp_start":
        return _ramp_args(op, args, kwargs), {}
    if op in NO_ARGS:
        if args or kwargs:
            raise InputError(f"{op}: takes no arguments")
        return (), {}
    if op not in _SIGNATURES:
        return _generic_args(op, args, kwargs)
    positional, keywords = _SIGNATURES[op]
    if len(args) > len(positional) + len(keywords):
        raise InputError(f"{op}: too many arguments ({len(args)})")
    bound: dict[str, Any] = dict(zip((*positional, *keywords), args, strict=False))
    for key, value in kwargs.items():
        if key not in keywords and key not in positional:
            raise InputError(f"{op}: unknown argument {key[:40]!r}")
        if key in bound:
            raise InputError(f"{op}: {key} given twice")
        bound[key] = value
    missing = [p for p in positional if p not in bound]
    if missing:
        raise InputError(f"{op}: missing {', '.join(missing)}")
    out_args = tuple(_name(op, bound[p]) if p == "name" else _changes(op, bound[p]) for p in positional)
    # Only what the viewer gave goes on: the defaults are the supervisor's own.
    out_kw = {k: _grace(op, v) if k == "grace" else _flag(op, k, v) for k, v in bound.items() if k in keywords}
    return out_args, out_kw


NO_ARGS = frozenset({"status", "history", "wake", "request_state_files", "stats"})


def _generic_args(op: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """An op without a signature here (one a newer serve declares): the rules every call keeps, a finite number
    wherever a number is, ``grace`` as a stop takes it and ``force`` true or false. Declare it in
    :data:`_SIGNATURES` for its names and types to be checked too."""
    for value in (*args, *kwargs.values()):
        if isinstance(value, float) and not math.isfinite(value):
            raise InputError(f"{op}: {value!r} is not a finite number")
    out = dict(kwargs)
    if "grace" in out:
        out["grace"] = _grace(op, out["grace"])
    if "force" in out:
        out["force"] = _flag(op, "force", out["force"])
    return args, out


def _ramp_args(op: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]:
    if kwargs or len(args) != 4:
        raise InputError(f"{op}: takes (worker, url, gpus, settings)")
    worker, url, gpus, settings = args
    _name(op, worker)
    if not isinstance(url, str) or len(url) > 2048:
        raise InputError(f"{op}: url {str(url)[:40]!r} is not a URL")
    if gpus is not None and (
        not isinstance(gpus, (list, tuple)) or not all(isinstance(g, int) and not isinstance(g, bool) for g in gpus)
    ):
        raise InputError(f"{op}: gpus {str(gpus)[:40]!r} is not a list of GPU indices")
    if not isinstance(settings, dict) or not all(isinstance(k, str) for k in settings):
        raise InputError(f"{op}: settings must be a mapping of names")
    return worker, url, None if gpus is None else tuple(gpus), settings


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
