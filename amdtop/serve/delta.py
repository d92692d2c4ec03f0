"""A frame as it goes to a viewer that holds the one before it: references in place of what that viewer already has.

A frame's history (a few minutes of every GPU's samples) is most of its bytes and most of a viewer's unpickling, yet
from one tick to the next it moves on by one point. So a viewer that holds the previous tick gets the frame with
references in place of its history (the newest point of each series, :func:`history_delta`, from which it rebuilds
the same history, :func:`apply_history_delta`) and of the parts that are the very same objects as in the last frame
(the audit report, which rides unchanged until its next run, and the topology: :data:`KEPT_PARTS`), resolved from the
frame it holds as the frame is unpickled (:func:`held_back`, :func:`resolve_held`: no copy of the frame on the
viewer's side); a viewer that missed a tick (a slow one whose queue dropped frames, or one that just connected) gets
the whole frame. What a message is and how it is framed is :mod:`amdtop.serve.wire`'s.
"""

from __future__ import annotations

import dataclasses
import operator
from collections.abc import Callable
from typing import Any

from amdtop.model import NodeSnapshot
from amdtop.pipeline.frame import GpuHistory, NodeFrame
from amdtop.pipeline.series import moved_on, newest
from amdtop.serve.errors import WireError
from amdtop.serve.reducers import REDUCERS, by_fields

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
and nothing changed (``amdtop.logread.rccl.monitor.LogMonitor.poll``)."""


_KEPT_GET: dict[str, Callable[[NodeFrame], object]] = {p: operator.attrgetter(p) for p in KEPT_PARTS}
"""Each kept part's getter (one C call, dotted paths included): what a viewer's unpickler answers a reference with."""


def _fields_of(cls: type) -> tuple[Callable[[Any], tuple[Any, ...]], dict[str, int]]:
    """A getter of ``cls``'s field values in ``__init__`` order (one C call) and each field's place in them."""
    names = [f.name for f in dataclasses.fields(cls)]
    return operator.attrgetter(*names), {name: i for i, name in enumerate(names)}


# A held-back frame goes as ``NodeFrame(*values)`` and its snapshot as ``NodeSnapshot(*values)`` (what by_fields
# pickles them as): a class that stops rebuilding that way must fail here, at import, not on a viewer.
if by_fields(NodeFrame) is None or by_fields(NodeSnapshot) is None:
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
    viewer's unpickler answers from the frame it holds (:class:`~amdtop.serve.wire.WireUnpickler`), as the frame is unpickled."""

    __slots__ = ("ref",)

    def __init__(self, ref: HeldRef) -> None:
        self.ref = ref


def held_part(ref: HeldRef) -> object:
    """The name a :class:`Held` part is pickled under; only a viewer's unpickler resolves it."""
    raise WireError(f"frame part {ref!r} read without the frame it refers to")


REDUCERS[Held] = lambda held: (held_part, (held.ref,))


class Rebuilt:
    """A frame or a snapshot with :class:`Held` among its field values, as :func:`held_back` gives it: pickled as
    ``cls(*values)``, the very stream the object itself pickles as (:func:`~amdtop.serve.reducers.by_fields`), so the viewer builds the
    frame once, as it loads. The serve used to build it first (``dataclasses.replace`` of the 22-field frame and of
    its snapshot, and a look at each kept part through ``getattr`` by path): with that gone, a delta encode went
    274 -> 161 us cold on the dev VM (``bench/wire_cold.py``; docs/benchmarks.md, session 20)."""

    __slots__ = ("cls", "values")

    def __init__(self, cls: type, values: tuple[Any, ...]) -> None:
        self.cls = cls
        self.values = values


REDUCERS[Rebuilt] = lambda built: (built.cls, built.values)


def held_back(previous: NodeFrame, frame: NodeFrame, delta: HistoryDelta | None) -> NodeFrame | Rebuilt:
    """``frame`` as it goes to a viewer that holds ``previous``: :class:`Held` in place of the kept parts, and of
    the history when ``delta`` moves the last one on to it (for :func:`~amdtop.serve.wire.encode` only)."""
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


HELD_NAME = (held_part.__module__, held_part.__name__)
"""What a held part is pickled as: the name only a viewer's unpickler answers (:func:`resolve_held`)."""


def resolve_held(last: NodeFrame | None, ref: object) -> object:
    """The part ``ref`` stands for, from ``last``, the frame the viewer holds (WireError when it holds none, or when
    ``ref`` is not a part a viewer keeps)."""
    if last is None:
        raise WireError("frame refers to the one before it, which this viewer does not hold")
    if type(ref) is str:
        part = _KEPT_GET.get(ref)
        if part is not None:
            return part(last)
    elif isinstance(ref, tuple) and len(ref) == 2 and ref[0] == "history":
        return apply_history_delta(last.history, ref[1])
    raise WireError(f"frame part {ref!r} is not one a viewer keeps")
