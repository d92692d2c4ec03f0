"""One GPU's series in a frame's history: the last points, oldest first, as an immutable window on a list that only
ever grows at its end, shared by the frames that follow one another.

A frame's history used to be rebuilt as tuples every tick: 300 points a series, three series a GPU, copied from the
pipeline's deques (and, in an attached viewer, once more from the last frame's tuples). Each copy touches every
point's reference count, and dropping the frame two ticks later touches them all again: on a machine that charges for
each memory page a 1 Hz program touches, that was most of what the history cost (docs/benchmarks.md, session 20).
Moving a window on by a point appends one point and makes one small object.

A window never changes: points are only appended past the end of every window on its list (:meth:`Series.then`
appends in place only to the window that ends where the list ends, and copies otherwise), and a list that has grown
to twice the window is left to the frames that hold it while the next window starts a new one. Windows are read from
any thread (a slice or an index of a list is one step under the GIL); one list is moved on from one thread only (the
pipeline's tick, under the runtime's tick lock; a viewer's reading of its socket), as :meth:`Series.then` looks at the
list's end and then appends.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from itertools import islice
from typing import overload

Point = float | None


class Series(Sequence[Point]):
    """The last points of one series, oldest first (``None`` where the source gave nothing); compares equal to a
    tuple of the same points. Pickled as its points."""

    __slots__ = ("_points", "_start", "_stop", "last")

    def __init__(self, points: Iterable[Point] = ()) -> None:
        self._points: list[Point] = list(points)
        self._start = 0
        self._stop = len(self._points)
        self.last: Point = self._points[-1] if self._points else None
        """The newest point (``None`` also for an empty series): a plain attribute, read every tick by the serve's
        hour history, the history pane and the wire, where ``series[-1]`` is a Python call."""

    @classmethod
    def _window(cls, points: list[Point], start: int, stop: int) -> Series:
        out = cls.__new__(cls)
        out._points, out._start, out._stop = points, start, stop
        out.last = points[stop - 1] if stop > start else None
        return out

    def then(self, point: Point, keep: int) -> Series:
        """This window moved on by ``point``: its last ``keep`` points (``keep`` >= 1)."""
        points, stop = self._points, self._stop
        if stop != len(points) or stop >= 2 * keep or self._start == stop:
            # Another window already went on from this list's end, the list has grown far enough, or this is an
            # empty window (the shared default): a new list with the points kept.
            points = self._points[max(self._start, stop - keep + 1) : stop]
            stop = len(points)
        points.append(point)
        stop += 1
        return Series._window(points, max(self._start if points is self._points else 0, stop - keep), stop)

    def __len__(self) -> int:
        return self._stop - self._start

    @overload
    def __getitem__(self, index: int) -> Point: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[Point, ...]: ...

    def __getitem__(self, index: int | slice) -> Point | tuple[Point, ...]:
        size = self._stop - self._start
        if isinstance(index, slice):
            first, last, step = index.indices(size)
            if step == 1:
                return tuple(self._points[self._start + first : self._start + max(first, last)])
            return tuple(self._points[self._start : self._stop][index])
        if index < 0:
            index += size
        if not 0 <= index < size:
            raise IndexError("series index out of range")
        return self._points[self._start + index]

    def __iter__(self) -> Iterator[Point]:
        return islice(self._points, self._start, self._stop)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Series):
            return self.points() == other.points()
        if isinstance(other, tuple):
            return self.points() == other
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.points())

    def points(self) -> tuple[Point, ...]:
        """The points as a tuple (a copy)."""
        return tuple(self._points[self._start : self._stop])

    def __repr__(self) -> str:
        return f"Series({list(self)!r})"

    def __reduce__(self) -> tuple[type[Series], tuple[tuple[Point, ...]]]:
        return Series, (self.points(),)


def newest(series: Sequence[Point]) -> Point:
    """The newest point of ``series`` (``None`` when it has none)."""
    if type(series) is Series:
        return series.last
    return series[-1] if series else None


def moved_on(series: Sequence[Point], point: Point, keep: int) -> Series:
    """``series`` (a :class:`Series`, or any sequence of points) moved on by ``point``, its last ``keep`` kept."""
    if isinstance(series, Series):
        return series.then(point, keep)
    return Series((*series[max(0, len(series) - keep + 1) :], point))
