"""Frames on the wire without their history: a viewer rebuilds the serve's history exactly from the last frame and
the newest points, and gets whole frames whenever it did not hold the frame before (connect, dropped frames)."""

from __future__ import annotations

import dataclasses
import itertools
import math
import pickle
import random
import socket
from pathlib import Path

import pytest

from amdtop.gpuprocs import GpuProcessTotal, ProcessRow
from amdtop.model import NodeSnapshot, Topology
from amdtop.pipeline.frame import GpuHistory, NodeFrame
from amdtop.pipeline.series import Series
from amdtop.serve.client import ServeClient
from amdtop.serve.delta import Held, apply_history_delta, held_back, history_delta, kept_parts
from amdtop.serve.server import Serve
from amdtop.serve.viewers import FramePacket, ViewerLink
from amdtop.serve.wire import WireError, decode, encode, read_message
from tests.unit.test_serve import _wait, serve  # noqa: F401  (the fixture)


class Pipeline:
    """Histories the way the pipeline keeps them: three windows per GPU, each moved on by a point a tick."""

    def __init__(self, gpus: list[int], keep: int) -> None:
        self.keep = keep
        self.series: dict[int, tuple[Series, ...]] = {}
        self.set_gpus(gpus)

    def set_gpus(self, gpus: list[int]) -> None:
        self.series = {g: self.series.get(g) or (Series(), Series(), Series()) for g in gpus}

    def restart(self, gpu: int) -> None:
        self.series[gpu] = (Series(), Series(), Series())

    def tick(self, rng: random.Random) -> tuple[GpuHistory, ...]:
        for g, parts in self.series.items():
            self.series[g] = tuple(
                s.then(rng.choice([None, math.nan, round(rng.uniform(0, 700), 1), 0.0]), self.keep) for s in parts
            )
        return tuple(GpuHistory(g, *parts) for g, parts in sorted(self.series.items()))


def _plain(history: tuple[GpuHistory, ...]) -> str:
    """The points as text (NaN points are new objects on a viewer: they compare as text only)."""
    return repr([(h.index, tuple(h.util_pct), tuple(h.vram_pct), tuple(h.power_w), h.points) for h in history])


def test_a_history_moved_on_by_a_point_is_rebuilt_exactly() -> None:
    rng = random.Random(7)
    pipe = Pipeline([0, 1, 2], keep=5)
    old = pipe.tick(rng)
    moved = whole = 0
    for step in range(60):
        if step == 20:
            pipe.set_gpus([0, 2])  # a GPU lost: the history is no longer the last one moved on
        if step == 40:
            pipe.restart(2)  # a GPU's series restarted (the pipeline appends to all three at once)
        new = pipe.tick(rng)
        delta = history_delta(old, new)
        if delta is None:
            whole += 1
        else:
            moved += 1
            rebuilt = apply_history_delta(old, delta)
            assert _plain(rebuilt) == _plain(new)
            assert pickle.dumps(rebuilt) == pickle.dumps(new)  # the same points, pickled as the wire does it
        old = new
    # Only the GPU change goes whole; a restarted GPU (one point left) is a delta too, and rebuilt exactly above.
    assert (moved, whole) == (59, 1)


def test_a_delta_against_another_history_is_a_wire_error() -> None:
    rng = random.Random(1)
    pipe = Pipeline([0, 1], keep=4)
    a = pipe.tick(rng)
    b = pipe.tick(rng)
    delta = history_delta(a, b)
    assert delta is not None
    with pytest.raises(WireError, match="history delta for 2 GPUs against 1"):
        apply_history_delta(a[:1], delta)
    with pytest.raises(WireError, match="does not follow the last frame"):
        apply_history_delta((GpuHistory(5, a[0].util_pct, a[0].vram_pct, a[0].power_w), a[1]), delta)


TOPOLOGY = Topology((), (), ())


def _sent(previous: NodeFrame, frame: NodeFrame) -> bytes:
    """``frame`` as the serve sends it to a viewer that holds ``previous``."""
    held = held_back(previous, frame, history_delta(previous.history, frame.history))
    return encode({"type": "frame", "frame": held, "base_tick": previous.tick})


def test_a_viewer_keeps_only_the_parts_the_wire_names() -> None:
    a = _frame(1, ())
    b = dataclasses.replace(_frame(2, ()), snapshot=dataclasses.replace(a.snapshot, timestamp=2.0))
    assert kept_parts(a, b) == ("snapshot.topology",)
    assert (
        kept_parts(a, dataclasses.replace(b, snapshot=dataclasses.replace(b.snapshot, topology=Topology((), (), ()))))
        == ()
    )
    sent = _sent(a, b)
    assert pickle.dumps(TOPOLOGY) not in sent  # a reference, not the topology
    back = decode(sent[4:], a)["frame"]
    assert back == b and back.snapshot.topology is a.snapshot.topology and back.snapshot.timestamp == 2.0
    # A reference names a part the wire lets a viewer keep, and needs the frame it refers to.
    with pytest.raises(WireError, match=r"frame part 'snapshot\.hostname' is not one a viewer keeps"):
        decode(encode({"type": "frame", "x": Held("snapshot.hostname")})[4:], a)
    with pytest.raises(WireError, match=r"frame part \('eval', 1\) is not one a viewer keeps"):
        decode(encode({"type": "frame", "x": Held(("eval", 1))})[4:], a)  # type: ignore[arg-type]
    with pytest.raises(WireError, match="does not hold"):
        decode(sent[4:], None)
    with pytest.raises(WireError, match="frame follows tick 1, this viewer holds 2"):
        decode(sent[4:], b)


def test_process_rows_unchanged_since_the_last_frame_stay_with_the_viewer() -> None:
    """Between readings of the process lists the pipeline hands on the same row tuples (issue 34): the serve sends
    none of them, the viewer puts its own back (the same objects, so its pane does not redraw them)."""
    rows = (ProcessRow(0, 10, "python3", 1 << 30),)
    totals = (GpuProcessTotal(0, 1, 1 << 30, 2 << 30),)
    a = dataclasses.replace(_frame(1, ()), processes=rows, process_totals=totals)
    b = dataclasses.replace(_frame(2, ()), snapshot=a.snapshot, processes=rows, process_totals=totals)
    parts = kept_parts(a, b)
    assert parts == ("snapshot.topology", "processes", "process_totals")
    sent = _sent(a, b)
    assert b"python3" not in sent
    back = decode(sent[4:], a)["frame"]
    assert back.processes is rows and back.process_totals is totals
    # Equal rows that are other objects (a reading that found the same) go whole: identity is what is free to tell.
    c = dataclasses.replace(b, processes=tuple(r._replace() for r in rows))
    assert kept_parts(b, c) == ("snapshot.topology", "process_totals")
    assert b"python3" in _sent(b, c)


def _frame(tick: int, history: tuple[GpuHistory, ...]) -> NodeFrame:
    snap = NodeSnapshot(timestamp=float(tick), hostname="h", backend="sim", topology=TOPOLOGY, gpus=())
    return NodeFrame(snapshot=snap, history=history, tick=tick)


def test_a_link_sends_whole_frames_unless_its_viewer_holds_the_one_before() -> None:
    rng = random.Random(3)
    pipe = Pipeline([0, 1], keep=300)
    for _ in range(100):
        pipe.tick(rng)
    frames = [_frame(i + 1, pipe.tick(rng)) for i in range(5)]
    ours, theirs = socket.socketpair()
    link = ViewerLink(ours, 1, readonly=True).start()
    try:
        link.offer_frame(FramePacket(frames[0]))
        first = read_message(theirs)
        assert repr(first["frame"]) == repr(frames[0]) and "base_tick" not in first  # NaN != NaN: as text
        link.offer_frame(FramePacket(frames[1], frames[0]))
        size = int.from_bytes(theirs.recv(4), "big")
        body = theirs.recv(size, socket.MSG_WAITALL)
        second = decode(body, first["frame"])
        assert second["base_tick"] == 1 and repr(second["frame"]) == repr(frames[1])
        # The topology is the same object in both frames: the viewer keeps its own (no audit ran: none to keep).
        assert second["frame"].snapshot.topology is first["frame"].snapshot.topology
        assert size * 3 < len(FramePacket(frames[1]).whole())  # 100 points a series against one
        # frames[2] never reached this viewer (dropped): frames[3] moved on from it, so it goes whole.
        link.offer_frame(FramePacket(frames[3], frames[2]))
        third = read_message(theirs)
        assert repr(third["frame"]) == repr(frames[3]) and "base_tick" not in third
        link.offer_frame(FramePacket(frames[4], frames[3]))
        assert read_message(theirs, third["frame"])["base_tick"] == 4
    finally:
        link.close()
        theirs.close()


def test_viewers_rebuild_the_serves_frames(serve: Serve) -> None:  # noqa: F811
    published: dict[int, NodeFrame] = {}
    unsubscribe = serve.runtime.subscribe(lambda f: published.__setitem__(f.tick, f))
    client = ServeClient(Path(serve.state_dir))
    got: list[NodeFrame] = []
    try:
        client.subscribe(got.append)
        _wait(lambda: client.moved_on >= 5)
        for frame in list(got):
            if frame.tick in published:
                assert frame == published[frame.tick]
        assert client.moved_on >= 5 and client.frames >= client.moved_on + 1
        assert any(f.audit is not None for f in got)  # the demo's audit rides in every frame, kept or sent
    finally:
        unsubscribe()
        client.close()


def test_counted_histories_move_on_by_their_counts() -> None:
    """The pipeline counts each GPU's points: one more, with a deque's lengths, is a point on (no point is read);
    any other count goes whole. The rebuilt history carries the count on."""
    from amdtop.pipeline.producer import NodePipeline
    from amdtop.telemetry.sim import SimBackend

    pipeline = NodePipeline(SimBackend(seed=3), None, discover=False, follow_logs=False, history_points=4)
    try:
        frames = [pipeline.tick() for _ in range(8)]
    finally:
        pipeline.close()
    assert [f.history[0].points for f in frames] == list(range(1, 9))
    for old, new in itertools.pairwise(frames):
        delta = history_delta(old.history, new.history)
        assert delta is not None
        assert repr(apply_history_delta(old.history, delta)) == repr(new.history)
    # A frame missed in between (counts two apart) is not the last one moved on, however its points read.
    assert history_delta(frames[2].history, frames[4].history) is None
    # The count is what is trusted: the same points under a count one off go whole.
    skewed = tuple(dataclasses.replace(h, points=h.points + 1) for h in frames[5].history)
    assert history_delta(frames[4].history, skewed) is None
