"""What the node service's protocol declares, read off its one declaration: the :class:`~amdtop.service.api.NodeService`
methods marked as ops (their names, parameter and return types) and the :class:`~amdtop.pipeline.frame.NodeFrame` tree.

From it come, and from nowhere else:
- :func:`travelling_types`: every amdtop class a message may carry (dataclasses, enums, named tuples and the plain
  classes such as :class:`~amdtop.pipeline.series.Series` that a frame holds), found by walking the type hints;
- :func:`fingerprint`: a hash of each such type's shape (its fields, or its constructor's parameters and slots, or
  its members) and of the ops' signatures: a field added to any of them changes the wire's version;
- :func:`check_call`: a call's arguments checked against the op's declared parameters, as the CLI checks them.

The serve's unpickler allows exactly :func:`travelling_types` (and a few plain stdlib types), resolved from the
classes themselves: a message never makes this process import a module.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import enum
import hashlib
import inspect
import math
import reprlib
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from amdtop.errors import InputError
from amdtop.pipeline.frame import NodeFrame
from amdtop.service.api import WIRE_OPS, NodeService

_SHOWN = reprlib.Repr()
_SHOWN.maxlevel, _SHOWN.maxstring, _SHOWN.maxother = 2, 40, 40
_SHOWN.maxlist = _SHOWN.maxtuple = _SHOWN.maxdict = _SHOWN.maxset = 4


def shown(value: object) -> str:
    """``value`` as an error line quotes it: bounded in length and depth (a peer's deeply nested list is never walked:
    ``str()`` of one recursed until RecursionError)."""
    try:
        return _SHOWN.repr(value)
    except Exception:  # a hostile __repr__ of some stdlib type: name the type only
        return f"<{type(value).__name__}>"


# -- the types that travel ------------------------------------------------------------------------------------------
def _is_named_tuple(tp: type) -> bool:
    return issubclass(tp, tuple) and hasattr(tp, "_fields")


def _hints(obj: Any) -> dict[str, Any]:
    try:
        return typing.get_type_hints(obj, include_extras=True)
    except Exception:  # a name only imported for the type checker: the raw annotations still say what the field is
        return dict(getattr(obj, "__annotations__", {}))


def _shape(tp: type) -> tuple[str, list[tuple[str, str]], list[Any]]:
    """``(kind, [(name, type text)], [types to walk on])`` of one amdtop class."""
    if dataclasses.is_dataclass(tp):
        hints = _hints(tp)
        fields = dataclasses.fields(tp)
        return "dataclass", [(f.name, repr(hints.get(f.name, f.type))) for f in fields], [hints.get(f.name) for f in fields]
    if issubclass(tp, enum.Enum):
        return "enum", [(m.name, repr(m.value)) for m in tp], []
    if _is_named_tuple(tp):
        hints = _hints(tp)
        names: tuple[str, ...] = getattr(tp, "_fields", ())
        return "namedtuple", [(name, repr(hints.get(name))) for name in names], [hints.get(n) for n in names]
    # A plain class: what its constructor takes and what it stores (its slots) say what a pickled one holds.
    hints = _hints(tp.__init__)
    params = [p for p in inspect.signature(tp.__init__).parameters.values() if p.name != "self"]
    slots = [s for c in tp.__mro__ for s in getattr(c, "__slots__", ()) if isinstance(s, str)]
    shape = [(p.name, repr(hints.get(p.name))) for p in params] + [(f"slot {s}", "") for s in sorted(set(slots))]
    return "class", shape, [hints.get(p.name) for p in params]


def _walk(tp: object, seen: dict[type, tuple[str, list[tuple[str, str]]]], outside: set[type]) -> None:
    if isinstance(tp, type) and not isinstance(tp, types.GenericAlias):
        if tp in seen or tp in outside:
            return
        carried = dataclasses.is_dataclass(tp) or issubclass(tp, enum.Enum) or _is_named_tuple(tp)
        if not (carried or tp.__module__.startswith("amdtop")):
            outside.add(tp)  # a builtin (str, float, ...): pickle has opcodes of its own for those
            return
        seen[tp] = ("", [])  # a cycle stops here
        kind, fields, inner = _shape(tp)
        seen[tp] = (kind, fields)
        for arg in inner:
            _walk(arg, seen, outside)
        return
    for arg in typing.get_args(tp):
        _walk(arg, seen, outside)


def _op_hints(op: str) -> dict[str, Any]:
    return _hints(getattr(NodeService, op))


def _walk_protocol(
    root: type = NodeFrame, ops: Iterable[str] = WIRE_OPS
) -> tuple[dict[type, tuple[str, list[tuple[str, str]]]], set[type]]:
    seen: dict[type, tuple[str, list[tuple[str, str]]]] = {}
    outside: set[type] = set()
    _walk(root, seen, outside)
    for op in sorted(ops):
        for hint in _op_hints(op).values():
            _walk(hint, seen, outside)
    return seen, outside


def travelling_types(root: type = NodeFrame, ops: Iterable[str] = WIRE_OPS) -> frozenset[type]:
    """Every amdtop class reachable from the frame's type tree and the ops' parameter and return types."""
    return frozenset(_walk_protocol(root, ops)[0])


def fingerprint(root: type = NodeFrame, ops: Iterable[str] = WIRE_OPS) -> str:
    """A short hash of every travelling type's shape and of each op's signature: what a pickled frame and a request
    mean. A field added to any type that travels changes it; nobody has to remember to."""
    seen, _outside = _walk_protocol(root, ops)
    shapes = sorted((f"{t.__module__}.{t.__qualname__}", kind, fields) for t, (kind, fields) in seen.items())
    signatures = sorted((op, str(inspect.signature(getattr(NodeService, op)))) for op in ops)
    return hashlib.sha256(repr((shapes, signatures)).encode()).hexdigest()[:12]


# -- the argument checks --------------------------------------------------------------------------------------------
MAX_TEXT = 255
"""A worker name, a fix id: the longest a file name in the state dir may be."""
MAX_URL = 2048
MAX_GRACE_S = 7 * 24 * 3600.0
"""The longest grace a stop takes: the CLI's ``--grace`` limit (a week)."""


def _bad(op: str, name: str, value: object, want: str) -> InputError:
    return InputError(f"{op}: {name} {shown(value)} is not {want}")


def _check_grace(op: str, value: object) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InputError(f"{op}: grace {shown(value)} is not a number of seconds; e.g. 30")
    if not math.isfinite(value):
        raise InputError(f"{op}: grace {value!r} is not a finite number of seconds; e.g. 30")
    if value < 0:
        raise InputError(f"{op}: grace {value:g} must be at least 0 seconds; e.g. 30")
    if value > MAX_GRACE_S:
        raise InputError(f"{op}: grace {value:g} is more than a week ({MAX_GRACE_S:g} s); give fewer seconds")
    return float(value)


def _finite(op: str, name: str, value: object) -> None:
    if isinstance(value, float) and not math.isfinite(value):
        raise InputError(f"{op}: {name} {value!r} is not a finite number")


def _check(op: str, name: str, hint: Any, value: object) -> Any:
    """``value`` of parameter ``name`` checked against its declared type ``hint`` (InputError naming both)."""
    if name == "grace":
        return _check_grace(op, value)
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        rest = [a for a in args if a is not type(None)]
        return _check(op, name, rest[0] if len(rest) == 1 else Any, value)
    if hint is bool:
        if not isinstance(value, bool):
            raise InputError(f"{op}: {name} {shown(value)} is not true or false")
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int) or not -(2**63) <= value < 2**63:
            raise _bad(op, name, value, "an integer")
        return value
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise _bad(op, name, value, "a number")
        _finite(op, name, value)
        return float(value)
    if hint is str:
        limit = MAX_URL if name == "url" else MAX_TEXT
        if not isinstance(value, str) or (name != "url" and not value) or len(value) > limit:
            raise _bad(op, name, value, "a URL" if name == "url" else "a worker name")
        return value
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        if not isinstance(value, (list, tuple)) or len(value) > 4096:
            raise _bad(op, name, value, "a list")
        return tuple(_check(op, name, args[0], v) for v in value)
    if origin in (collections.abc.Mapping, dict) and args:
        if not isinstance(value, Mapping) or len(value) > 4096 or not all(isinstance(k, str) for k in value):
            if args[1] is str:
                raise InputError(f"{op}: {name} must map KEY to VALUE text; e.g. {{'max-num-seqs': '64'}}")
            raise InputError(f"{op}: {name} must be a mapping of names")
        if args[1] is str:
            if not all(isinstance(v, str) for v in value.values()):
                raise InputError(f"{op}: {name} must map KEY to VALUE text; e.g. {{'max-num-seqs': '64'}}")
        else:
            for key, v in value.items():
                _finite(op, f"{name}.{key}", v)
        return dict(value)
    _finite(op, name, value)
    return value


_Signature = tuple[inspect.Signature, dict[str, Any]]
_SIGNATURES: dict[str, _Signature] = {}


def _signature(op: str) -> _Signature:
    found = _SIGNATURES.get(op)
    if found is None:
        fn: Callable[..., Any] = getattr(NodeService, op)
        found = _SIGNATURES[op] = (inspect.signature(fn), _op_hints(op))
    return found


def check_call(op: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """``args`` and ``kwargs`` of the op ``op`` (one of :data:`~amdtop.service.api.WIRE_OPS`) bound to its declared
    parameters and each checked as its type says (InputError, one line, naming the field). Only what the caller gave
    goes on: the defaults are the service's own."""
    sig, hints = _signature(op)
    try:
        bound = sig.bind(None, *args, **kwargs)  # None stands for self
    except TypeError as exc:
        raise InputError(f"{op}: {exc}") from None
    names = list(sig.parameters)[1:]
    given = list(bound.arguments.items())[1:]
    out_args: list[Any] = []
    out_kw: dict[str, Any] = {}
    for pname, value in given:
        checked = _check(op, pname, hints.get(pname, Any), value)
        if pname in kwargs or names.index(pname) >= len(args):
            out_kw[pname] = checked
        else:
            out_args.append(checked)
    return tuple(out_args), out_kw
