"""The serve <-> viewer wire format: length-prefixed messages over the serve's Unix socket, versioned by a hello.

Each message is a 4-byte big-endian length and a pickled dict. Pickle can run code on load, so two things hold:
who may send one is checked before a byte of it is read (:mod:`amdtop.serve.peer`: the state dir and the socket are
this user's, SO_PEERCRED says the peer runs as this user, or root for a serve), and what it may name is an
allow-list (:class:`WireUnpickler`: the frame's and the messages' own classes, dataclasses and enums of amdtop, and
a few plain stdlib types; never a function such as ``os.system``). A wire format that cannot run code at all
(msgpack or JSON of the frame's fields) is the node service's to settle. Frames are pickled once per tick and the
same bytes go to every viewer.

A frame's history (a few minutes of every GPU's samples) is most of its bytes and most of a viewer's unpickling, yet
from one tick to the next it moves on by one point. So a viewer that holds the previous tick gets the frame with
references in place of its history (the newest point of each series, :func:`history_delta`, from which it rebuilds
the same history, :func:`apply_history_delta`) and of the parts that are the very same objects as in the last frame
(the audit report, which rides unchanged until its next run, and the topology: :data:`KEPT_PARTS`), resolved from the
frame it holds as the frame is unpickled (:func:`held_back`: no copy of the frame on the viewer's side); a viewer
that missed a tick (a slow one whose queue dropped frames, or one that just connected) gets the whole frame.
"""

from __future__ import annotations

import copyreg
import dataclasses
import enum
import functools
import hashlib
import importlib
import io
import operator
import os
import pickle
import socket
import struct
import typing
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from amdtop.errors import AmdtopError
from amdtop.model import NodeSnapshot
from amdtop.pipeline.frame import GpuHistory, NodeFrame
from amdtop.pipeline.series import moved_on, newest
from amdtop.service.api import WIRE_OPS

WIRE_PROTOCOL = "0.4"
"""The envelope (length-prefixed pickled dicts, the hello, the call/reply/frame/ramp/bye messages): changed by hand
only when a message's own keys change. What the messages carry is fingerprinted (:func:`field_fingerprint`)."""


def _type_key(tp: type) -> str:
    return f"{tp.__module__}.{tp.__qualname__}"


def _walk(tp: object, seen: dict[str, object]) -> None:
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        key = _type_key(tp)
        if key in seen:
            return
        seen[key] = None  # a cycle stops here
        hints = typing.get_type_hints(tp)
        fields = dataclasses.fields(tp)
        seen[key] = [(f.name, repr(hints.get(f.name, f.type))) for f in fields]
        for f in fields:
            _walk(hints.get(f.name), seen)
    elif isinstance(tp, type) and issubclass(tp, enum.Enum):
        seen[_type_key(tp)] = [(m.name, repr(m.value)) for m in tp]
    else:
        for arg in typing.get_args(tp):
            _walk(arg, seen)


def field_fingerprint(root: type = NodeFrame, ops: Iterable[str] = WIRE_OPS) -> str:
    """A short hash of the frame's field tree (every dataclass reachable from ``root``: its module, name, and each
    field's name and type, recursively; every enum's members) and of the service's op names: what a pickled frame
    and a request mean. A changed field changes it; nobody has to remember to."""
    seen: dict[str, object] = {}
    _walk(root, seen)
    text = repr((sorted(seen.items()), sorted(ops)))
    return hashlib.sha256(text.encode()).hexdigest()[:12]


WIRE_VERSION = f"{WIRE_PROTOCOL}-{field_fingerprint()}"
"""What a viewer and a serve compare in their hellos: of different versions they refuse, naming both."""
SOCKET_NAME = "serve.sock"
MAX_MESSAGE = 64 << 20
"""A frame with an hour of history is well under this; a larger length means a broken peer."""
_HEADER = struct.Struct(">I")


class WireError(AmdtopError):
    """The peer closed, sent garbage, or speaks another version."""


def socket_path(state_dir: Path) -> Path:
    """Where the serve for ``state_dir`` listens."""
    return Path(state_dir) / SOCKET_NAME


def _by_fields(cls: type) -> Callable[[Any], tuple[type, tuple[Any, ...]]] | None:
    """A reducer that pickles an instance of ``cls`` as ``cls(*field values)``, where that rebuilds it: a dataclass
    with slots whose fields all go to ``__init__`` positionally and that has no ``__post_init__`` (``None`` else)."""
    if not (dataclasses.is_dataclass(cls) and "__slots__" in cls.__dict__) or hasattr(cls, "__post_init__"):
        return None
    fields = dataclasses.fields(cls)
    if not fields or any(not f.init or f.kw_only for f in fields):
        return None
    get = operator.attrgetter(*(f.name for f in fields))
    if len(fields) == 1:
        return lambda obj: (cls, (get(obj),))
    return lambda obj: (cls, get(obj))


class _Reducers(dict[type, Any]):
    """The wire's pickling table (a ``Pickler.dispatch_table``): amdtop's slotted dataclasses by :func:`_by_fields`,
    everything else as ``copyreg`` says. A frozen slotted dataclass otherwise pickles through the ``__getstate__``
    and ``__setstate__`` that ``dataclasses`` writes in Python, a loop over ``fields()`` per object each way: this
    halves encoding and decoding a frame (bench/serve_tick_parts.py).

    Each class's entry is made on its first lookup and kept, so later lookups are the dict's own (no Python call per
    object pickled): a class with no reducer of its own gets its ``__reduce_ex__``, which is what the pickler calls
    when the table has no entry."""

    def __missing__(self, cls: type) -> Any:
        reducer: Any = _by_fields(cls) if cls.__module__.startswith("amdtop") else None
        if reducer is None:
            reducer = copyreg.dispatch_table.get(cls)
        if reducer is None:
            if issubclass(cls, type):
                raise KeyError(cls)  # a class itself (an enum's metaclass): the pickler saves it by name
            reducer = _REDUCE_EX
        self[cls] = reducer
        return reducer


_REDUCE_EX = operator.methodcaller("__reduce_ex__", pickle.HIGHEST_PROTOCOL)
_REDUCERS = _Reducers()


def encode(message: dict[str, Any]) -> bytes:
    """One message as it goes on the wire."""
    out = io.BytesIO()
    pickler = pickle.Pickler(out, protocol=pickle.HIGHEST_PROTOCOL)
    pickler.dispatch_table = _REDUCERS
    pickler.dump(message)
    body = out.getvalue()
    return _HEADER.pack(len(body)) + body


def _read_exact(sock: socket.socket, n: int) -> bytes:
    chunks = []
    while n:
        chunk = sock.recv(min(n, 1 << 20))
        if not chunk:
            raise WireError("connection closed")
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


STDLIB_TYPES = frozenset(
    {
        ("builtins", "set"),
        ("builtins", "frozenset"),
        ("builtins", "complex"),
        ("builtins", "bytearray"),
        ("collections", "OrderedDict"),
        ("pathlib", "PosixPath"),
        ("pathlib", "PurePosixPath"),
    }
)
"""The only names outside amdtop a message may carry: plain data types."""
PLAIN_CLASSES = frozenset({("amdtop.rccl.lines", "LogLines"), ("amdtop.pipeline.series", "Series")})
"""amdtop classes that are neither dataclasses, enums nor named tuples and still ride in a frame (their constructor
only stores what it is given). A frame that grows another such class fails in the tests with a WireError naming it:
add it here once its ``__init__`` (which a pickle may call) is known to only store its arguments."""


@functools.lru_cache(maxsize=512)
def allowed_class(module: str, name: str) -> type | None:
    """The class ``module.name`` when a message may name it, else ``None``: one of :data:`STDLIB_TYPES`, or a class
    defined in an ``amdtop`` module that is a dataclass, an enum or a named tuple (what frames, statuses, profiles,
    findings and stop reports are). Functions, builtins such as ``eval`` and every other class are refused."""
    if (module, name) in STDLIB_TYPES or (module, name) in PLAIN_CLASSES:
        obj = getattr(importlib.import_module(module), name)
        return obj if isinstance(obj, type) else None
    if (module != "amdtop" and not module.startswith("amdtop.")) or "." in name:
        return None
    try:
        obj = getattr(importlib.import_module(module), name, None)
    except ImportError:
        return None
    if not isinstance(obj, type) or not obj.__module__.startswith("amdtop") or hasattr(obj, "__post_init__"):
        return None  # a __post_init__ would run on load (a dataclass is rebuilt by its __init__: _by_fields)
    named_tuple = issubclass(obj, tuple) and hasattr(obj, "_fields")
    return obj if dataclasses.is_dataclass(obj) or issubclass(obj, enum.Enum) or named_tuple else None


class WireUnpickler(pickle.Unpickler):
    """An unpickler that resolves only :func:`allowed_class` names (a ``WireError`` names any other), and the parts a
    frame holds back (:func:`held_back`) only from ``last``, the frame this viewer holds."""

    def __init__(self, file: io.BytesIO, last: NodeFrame | None = None) -> None:
        super().__init__(file)
        self._last = last

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) == _HELD_NAME:
            return self._held
        cls = allowed_class(module, name)
        if cls is None:
            raise WireError(f"message names {module}.{name}, which the wire does not carry")
        return cls

    def _held(self, ref: object) -> object:
        last = self._last
        if last is None:
            raise WireError("frame refers to the one before it, which this viewer does not hold")
        if type(ref) is str:
            part = _KEPT_GET.get(ref)
            if part is not None:
                return part(last)
        elif isinstance(ref, tuple) and len(ref) == 2 and ref[0] == "history":
            return apply_history_delta(last.history, ref[1])
        raise WireError(f"frame part {ref!r} is not one a viewer keeps")


def decode(body: bytes, last: NodeFrame | None = None) -> dict[str, Any]:
    """One message's body (WireError when it is not a mapping of allowed types); a frame's references to the one
    before it resolve against ``last`` (WireError when ``last`` is not the frame its ``base_tick`` names)."""
    try:
        message = WireUnpickler(io.BytesIO(body), last).load()
    except WireError:
        raise
    except Exception as exc:  # a truncated or foreign body: the peer is broken, not us
        raise WireError(f"unreadable message: {exc}") from None
    if not isinstance(message, dict):
        raise WireError("message is not a mapping")
    if "base_tick" in message and (last is None or last.tick != message["base_tick"]):
        have = None if last is None else last.tick
        raise WireError(f"frame follows tick {message['base_tick']}, this viewer holds {have}")
    return message


def read_message(sock: socket.socket, last: NodeFrame | None = None) -> dict[str, Any]:
    """The next message from ``sock`` (blocks; a frame's references resolve against ``last``); the peer was checked
    when it connected (:mod:`amdtop.serve.peer`)."""
    (size,) = _HEADER.unpack(_read_exact(sock, _HEADER.size))
    if size > MAX_MESSAGE:
        raise WireError(f"message of {size} bytes is over the {MAX_MESSAGE} limit")
    return decode(_read_exact(sock, size), last)


class MessageBuffer:
    """Bytes as a non-blocking socket gives them, cut into whole messages (what :func:`read_message` reads from a
    blocking one). Each is decoded as it is taken, against what ``last`` returns then: a frame that refers to the
    one before it needs that one taken first."""

    def __init__(self, last: Callable[[], NodeFrame | None] = lambda: None) -> None:
        self._data = bytearray()
        self._last = last

    def feed(self, data: bytes | memoryview) -> Iterator[dict[str, Any]]:
        """Add ``data``; yields the messages now whole, in order (WireError on a broken one)."""
        self._data += data
        return self._messages()

    def _messages(self) -> Iterator[dict[str, Any]]:
        while len(self._data) >= _HEADER.size:
            (size,) = _HEADER.unpack_from(self._data)
            if size > MAX_MESSAGE:
                raise WireError(f"message of {size} bytes is over the {MAX_MESSAGE} limit")
            end = _HEADER.size + size
            if len(self._data) < end:
                return
            body = bytes(self._data[_HEADER.size : end])
            del self._data[:end]
            yield decode(body, self._last())


def send_message(sock: socket.socket, message: dict[str, Any]) -> None:
    """Send one message (blocks until written)."""
    sock.sendall(encode(message))


HistoryDelta = tuple[tuple[int, int, float | None, float | None, float | None, int], ...]
"""Per GPU in frame order: (index, points in each series now, newest util %, VRAM %, power W, points counted)."""


def history_delta(old: tuple[GpuHistory, ...], new: tuple[GpuHistory, ...]) -> HistoryDelta | None:
    """``new`` as ``old`` moved on by one point per series; ``None`` where it is not (GPUs changed, a series was
    reset): then only the whole history says what ``new`` is.

    The pipeline counts each GPU's points (``GpuHistory.points``): one more than before, with the lengths a window
    moved on by one gives, is a point on, told without reading a point. Reading them (two slices per series, each
    point's reference count touched four times) cost the serve 44 us a tick cold on the dev VM for one GPU, 6.9 hot.
    Histories without counts (0) are compared point by point."""
    if len(old) != len(new):
        return None
    out = []
    for was, now in zip(old, new, strict=True):
        size = len(now.util_pct)
        held = len(was.util_pct)
        keep = size - 1
        if was.index != now.index or not 0 <= keep <= held:
            return None
        if not (len(now.vram_pct) == len(now.power_w) == size and len(was.vram_pct) == len(was.power_w) == held):
            return None
        if was.points and now.points:
            if now.points != was.points + 1 or size not in (held, held + 1):
                return None
        else:
            start = held - keep
            # Equal slices: the points are the same objects (the pipeline's windows share them), so a NaN compares
            # equal too.
            for a, b in ((was.util_pct, now.util_pct), (was.vram_pct, now.vram_pct), (was.power_w, now.power_w)):
                if a[start:] != b[:keep]:
                    return None
        out.append((now.index, size, newest(now.util_pct), newest(now.vram_pct), newest(now.power_w), now.points))
    return tuple(out)


def apply_history_delta(old: tuple[GpuHistory, ...], delta: HistoryDelta) -> tuple[GpuHistory, ...]:
    """The history :func:`history_delta` was taken from (WireError when ``old`` is not the history it moved on
    from: a broken stream, never a slow viewer, which gets whole frames)."""
    if len(old) != len(delta):
        raise WireError(f"history delta for {len(delta)} GPUs against {len(old)}")
    out = []
    for was, (index, size, util, vram, power, points) in zip(old, delta, strict=True):
        start = len(was.util_pct) - (size - 1)
        if was.index != index or size < 1 or start < 0:
            raise WireError(f"history delta of GPU {index} ({size} points) does not follow the last frame")
        out.append(
            GpuHistory(
                index,
                moved_on(was.util_pct, util, size),
                moved_on(was.vram_pct, vram, size),
                moved_on(was.power_w, power, size),
                points,
            )
        )
    return tuple(out)


KEPT_PARTS = ("audit", "snapshot.topology", "processes", "process_totals", "logs")
"""Frame parts a viewer takes from its last frame when the serve's are the same objects (identity, not equality:
free to tell). The audit's report is most of what is left of an idle frame once its history goes as a delta; the
process rows repeat as the same tuples between readings of the process lists (``amdtop.gpuprocs.ProcessTable``), and
a viewer handed the same tuples does not redraw them; the log monitor hands the same update again while no line came
and nothing changed (``amdtop.rccl.monitor.LogMonitor.poll``)."""


_KEPT_GET: dict[str, Callable[[NodeFrame], object]] = {p: operator.attrgetter(p) for p in KEPT_PARTS}
"""Each kept part's getter (one C call, dotted paths included): what a viewer's unpickler answers a reference with."""


def _fields_of(cls: type) -> tuple[Callable[[Any], tuple[Any, ...]], dict[str, int]]:
    """A getter of ``cls``'s field values in ``__init__`` order (one C call) and each field's place in them."""
    names = [f.name for f in dataclasses.fields(cls)]
    return operator.attrgetter(*names), {name: i for i, name in enumerate(names)}


# A held-back frame goes as ``NodeFrame(*values)`` and its snapshot as ``NodeSnapshot(*values)`` (what _by_fields
# pickles them as): a class that stops rebuilding that way must fail here, at import, not on a viewer.
if _by_fields(NodeFrame) is None or _by_fields(NodeSnapshot) is None:
    raise ImportError("NodeFrame and NodeSnapshot must be slotted dataclasses rebuilt by their fields")
_FRAME_VALUES, _FRAME_AT = _fields_of(NodeFrame)
_SNAPSHOT_VALUES, _SNAPSHOT_AT = _fields_of(NodeSnapshot)
_FRAME_KEPT = tuple((p, _FRAME_AT[p]) for p in KEPT_PARTS if "." not in p)
_SNAPSHOT_KEPT = tuple((p, _SNAPSHOT_AT[p.removeprefix("snapshot.")]) for p in KEPT_PARTS if p.startswith("snapshot."))
if len(_FRAME_KEPT) + len(_SNAPSHOT_KEPT) != len(KEPT_PARTS):
    raise ImportError(f"KEPT_PARTS may name a frame's fields and its snapshot's only: {KEPT_PARTS}")


def _keeps(was: object, now: object) -> bool:
    # An empty part (no process rows) costs nothing to send: only what is there is kept. No ``==`` here: a
    # dataclass's __eq__ is Python code run cold once a tick.
    return now is was and now is not None and (type(now) is not tuple or len(now) > 0)


def _held_in(was: tuple[Any, ...], now: tuple[Any, ...], kept: tuple[tuple[str, int], ...]) -> list[tuple[str, int]]:
    return [(name, i) for name, i in kept if _keeps(was[i], now[i])]


class _Shared:
    """What ``frame`` shares with ``previous``: both objects' field values and which kept parts are the same objects
    (name and place, in the frame and in its snapshot)."""

    __slots__ = ("frame", "in_frame", "in_snapshot", "snapshot")

    def __init__(self, previous: NodeFrame, frame: NodeFrame) -> None:
        self.frame = _FRAME_VALUES(frame)
        self.in_frame = _held_in(_FRAME_VALUES(previous), self.frame, _FRAME_KEPT)
        self.snapshot = _SNAPSHOT_VALUES(frame.snapshot)
        self.in_snapshot = _held_in(_SNAPSHOT_VALUES(previous.snapshot), self.snapshot, _SNAPSHOT_KEPT)


def kept_parts(previous: NodeFrame, frame: NodeFrame) -> tuple[str, ...]:
    """The parts of :data:`KEPT_PARTS` that ``frame`` shares with ``previous`` (the very same objects)."""
    shared = _Shared(previous, frame)
    found = {name for name, _ in shared.in_frame + shared.in_snapshot}
    return tuple(p for p in KEPT_PARTS if p in found)


HeldRef = str | tuple[str, HistoryDelta]
"""What stands in a frame for a part its viewer holds: a name of :data:`KEPT_PARTS` (the last frame's part), or
``("history", delta)`` (the last frame's history moved on by ``delta``)."""


class Held:
    """A part of a frame on the wire that its viewer holds: pickled as a call of :func:`held_part`, which the
    viewer's unpickler answers from the frame it holds (:class:`WireUnpickler`), as the frame is unpickled."""

    __slots__ = ("ref",)

    def __init__(self, ref: HeldRef) -> None:
        self.ref = ref


def held_part(ref: HeldRef) -> object:
    """The name a :class:`Held` part is pickled under; only a viewer's unpickler resolves it."""
    raise WireError(f"frame part {ref!r} read without the frame it refers to")


_HELD_NAME = (held_part.__module__, held_part.__name__)
_REDUCERS[Held] = lambda held: (held_part, (held.ref,))


class Rebuilt:
    """A frame or a snapshot with :class:`Held` among its field values, as :func:`held_back` gives it: pickled as
    ``cls(*values)``, the very stream the object itself pickles as (:func:`_by_fields`), so the viewer builds the
    frame once, as it loads. The serve used to build it first (``dataclasses.replace`` of the 22-field frame and of
    its snapshot, and a look at each kept part through ``getattr`` by path): with that gone, a delta encode went
    274 -> 161 us cold on the dev VM (``bench/wire_cold.py``; docs/benchmarks.md, session 20)."""

    __slots__ = ("cls", "values")

    def __init__(self, cls: type, values: tuple[Any, ...]) -> None:
        self.cls = cls
        self.values = values


_REDUCERS[Rebuilt] = lambda built: (built.cls, built.values)


def held_back(previous: NodeFrame, frame: NodeFrame, delta: HistoryDelta | None) -> NodeFrame | Rebuilt:
    """``frame`` as it goes to a viewer that holds ``previous``: :class:`Held` in place of the kept parts, and of
    the history when ``delta`` moves the last one on to it (for :func:`encode` only)."""
    shared = _Shared(previous, frame)
    held: list[tuple[int, object]] = [(i, Held(name)) for name, i in shared.in_frame]
    if shared.in_snapshot:
        values = list(shared.snapshot)
        for name, i in shared.in_snapshot:
            values[i] = Held(name)
        held.append((_FRAME_AT["snapshot"], Rebuilt(NodeSnapshot, tuple(values))))
    if delta is not None and frame.history:
        held.append((_FRAME_AT["history"], Held(("history", delta))))
    if not held:
        return frame
    values = list(shared.frame)
    for i, value in held:
        values[i] = value
    return Rebuilt(NodeFrame, tuple(values))


def check_version(theirs: object, *, serve_side: bool) -> None:
    """Raise the one-line error of a version mismatch (the text names who should restart)."""
    if theirs == WIRE_VERSION:
        return
    if serve_side:
        raise WireError(f"serve is {WIRE_VERSION}, viewer {theirs}: restart the viewer")
    # The usual cause: amdtop upgraded under a serve that still runs the old code.
    raise WireError(f"serve is {theirs}, viewer {WIRE_VERSION}: restart serve")


def peer_uid(sock: socket.socket) -> int:
    """The uid of the process at the other end of a Unix socket (SO_PEERCRED: pid, uid, gid)."""
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    _pid, uid, _gid = struct.unpack("3i", creds)
    return int(uid)


def own_uid() -> int:
    """This process's uid."""
    return os.getuid()
