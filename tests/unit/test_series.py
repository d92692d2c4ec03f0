"""A frame's history series: windows moved on by a point a tick, never changed once made, on lists that stay bounded."""

from __future__ import annotations

import math
import pickle

import pytest

from amdtop.pipeline.series import Series, moved_on, newest
from amdtop.serve.wire import decode, encode


def test_every_window_keeps_its_points_while_later_ones_move_on() -> None:
    keep = 4
    windows = [Series()]
    for i in range(50):
        windows.append(windows[-1].then(float(i), keep))
    for n, window in enumerate(windows):
        want = tuple(float(i) for i in range(max(0, n - keep), n))
        assert window == want and window.points() == want and len(window) == len(want)
    # A list grows to twice the window at most, then the next window starts a new one: frames alive hold the rest.
    assert max(len(w._points) for w in windows) <= 2 * keep
    assert windows[-1]._points is not windows[1]._points


def test_a_window_that_another_went_on_from_is_copied_not_appended_to() -> None:
    base = Series().then(1.0, 3).then(2.0, 3)
    a = base.then(3.0, 3)
    b = base.then(4.0, 3)  # the list's end is a's now: b gets a list of its own
    assert a == (1.0, 2.0, 3.0) and b == (1.0, 2.0, 4.0) and base == (1.0, 2.0)
    assert b._points is not a._points
    # The shared empty window is never appended to: each start gets its own list.
    empty = Series()
    one, two = empty.then(5.0, 3), empty.then(6.0, 3)
    assert (empty, one, two) == ((), (5.0,), (6.0,)) and len(empty._points) == 0


def test_a_series_reads_as_a_tuple_of_its_points() -> None:
    s = Series()
    for v in (1.0, None, 3.0, math.inf, 5.0):
        s = s.then(v, 4)
    assert s[-1] == 5.0 and s[0] is None and s[-4] is None
    assert s[-2:] == (math.inf, 5.0) and s[1:] == (3.0, math.inf, 5.0) and s[::2] == (None, math.inf)
    assert s[10:] == () and list(s) == [None, 3.0, math.inf, 5.0] and bool(s) and not Series()
    with pytest.raises(IndexError):
        s[4]
    with pytest.raises(IndexError):
        s[-5]
    assert hash(s) == hash((None, 3.0, math.inf, 5.0)) and s != (None, 3.0) and s != [None, 3.0, math.inf, 5.0]


def test_moved_on_takes_a_tuple_too() -> None:
    assert moved_on((1.0, 2.0, 3.0), 4.0, 3) == (2.0, 3.0, 4.0)
    assert moved_on((), 4.0, 1) == (4.0,)
    assert moved_on((1.0,), 2.0, 3) == (1.0, 2.0)


def test_a_series_crosses_the_wire_as_its_points() -> None:
    s = Series((1.0, None)).then(2.0, 2)
    back = decode(encode({"type": "x", "s": s})[4:])["s"]
    assert isinstance(back, Series) and back == (None, 2.0)
    assert pickle.loads(pickle.dumps(s)) == s


def test_the_newest_point_is_kept_as_an_attribute() -> None:
    s = Series((1.0, 2.0))
    assert s.last == 2.0 and newest(s) == 2.0 and Series().last is None and newest(Series()) is None
    t = s.then(None, 2).then(7.0, 2)
    assert t.last == 7.0 and s.then(None, 2).last is None
    assert newest((3.0, 4.0)) == 4.0 and newest(()) is None
