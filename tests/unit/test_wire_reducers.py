"""The wire pickles amdtop's slotted dataclasses as ``cls(*fields)`` (half the cost of the ``__getstate__`` and
``__setstate__`` that ``dataclasses`` writes in Python, per object each way), rebuilds every frame exactly, and a
message still cannot name a class whose load runs code beyond storing its fields."""

from __future__ import annotations

import dataclasses
import pickle
import tempfile
import typing
from pathlib import Path

import pytest

from amdtop import runtime
from amdtop.audit.auditor import Auditor
from amdtop.pipeline.frame import NodeFrame
from amdtop.runtime import NodeSpec
from amdtop.serve.reducers import by_fields
from amdtop.serve.viewers import FramePacket
from amdtop.serve.wire import WireError, decode, encode


def _frame_classes(tp: object, seen: set[type]) -> None:
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        if tp in seen:
            return
        seen.add(tp)
        hints = typing.get_type_hints(tp)
        for f in dataclasses.fields(tp):
            _frame_classes(hints.get(f.name), seen)
    else:
        for arg in typing.get_args(tp):
            _frame_classes(arg, seen)


def test_every_slotted_dataclass_of_the_frame_takes_the_fast_path() -> None:
    seen: set[type] = set()
    _frame_classes(NodeFrame, seen)
    slotted = sorted((c for c in seen if "__slots__" in c.__dict__), key=lambda c: c.__qualname__)
    assert len(slotted) > 20  # the walk reached the frame's tree, not just its root
    slow = [c.__qualname__ for c in slotted if by_fields(c) is None]
    # A field with init=False or kw_only, or a __post_init__, sends a class back to dataclasses' Python
    # __getstate__/__setstate__: correct, but twice the cost of every frame it rides in.
    assert slow == []


@pytest.fixture(scope="module")
def demo_frames() -> list[NodeFrame]:
    tmp = Path(tempfile.mkdtemp(prefix="amdtop-wire-"))
    node = runtime.open(NodeSpec(config=tmp / "none.toml", state_dir=tmp, demo=True), ui=True, kernel=False)
    try:
        return [node._node.pipeline.tick() for _ in range(4)]
    finally:
        node.shutdown()


def test_whole_and_delta_frames_come_back_equal(demo_frames: list[NodeFrame]) -> None:
    previous = None
    for frame in demo_frames:
        whole = decode(FramePacket(frame, previous).whole()[4:])["frame"]
        assert whole == frame
        assert type(whole.snapshot.gpus[0]) is type(frame.snapshot.gpus[0])
        if previous is not None:
            moved = decode(FramePacket(frame, previous).after(previous)[4:], previous)["frame"]
            assert moved == frame and moved.audit is previous.audit  # the audit rides unchanged: a reference
        previous = frame


def test_the_fast_form_is_what_goes_on_the_wire(demo_frames: list[NodeFrame]) -> None:
    frame = demo_frames[-1]
    body = encode({"type": "frame", "frame": frame})[4:]
    # cls(*fields) is a REDUCE; dataclasses' own form is NEWOBJ + BUILD with a __setstate__ call per object.
    assert body.count(pickle.REDUCE) > body.count(pickle.BUILD)
    assert len(body) < len(pickle.dumps({"type": "frame", "frame": frame}, protocol=pickle.HIGHEST_PROTOCOL))


def test_a_message_naming_a_class_with_post_init_is_refused() -> None:
    class Payload:
        def __reduce__(self):  # type: ignore[no-untyped-def]
            return (Auditor, ())

    assert hasattr(Auditor, "__post_init__")  # the case: loading it would run more than a field store
    with pytest.raises(WireError, match=r"amdtop\.audit\.auditor\.Auditor"):
        decode(pickle.dumps({"type": "frame", "x": Payload()}))
