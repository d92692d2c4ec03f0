"""The reader: feed it lines from any source (a job log, a worker's log, a kernel log); it keeps what the catalog
says they are, bounded by what will be reported, never by the input's length.

A line that matches an entry becomes a :class:`Sighting`, keyed by the entry and the scope the line names (rank,
host, device, peer, NIC port): a line repeated a million times is one sighting with a count, and at most
:data:`MAX_SIGHTINGS` distinct ones are kept (the rest are counted as ``dropped``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from amdtop.logread.catalog import Catalog, Entry, load_catalog
from amdtop.logread.match import Match, Matcher
from amdtop.logread.prefix import Head, read_head

MAX_LINE = 16384
"""Longer lines are not matched (a MB-long junk line must not cost regex time)."""
MAX_SIGHTINGS = 2048
"""Distinct (entry, scope) sightings kept; enough for every rank of a large job, bounded for a hostile one."""
MAX_FILES = 4096
MAX_CONTINUATION = 12
"""Lines of one message's continuation read at most (Ray's ActorDiedError prints six)."""


@dataclass(slots=True)
class Sighting:
    """Every line of one entry naming one scope: the first such line, and how many there were."""

    match: Match
    head: Head
    text: str
    """The first line as printed (stripped)."""
    file: str
    line: int
    order: tuple[float, int, int]
    """``(time, file index, line)``: events sort by this (time ``-1`` where the log names none)."""
    timed: bool
    count: int = 1
    last_time: float | None = None
    lines: list[str] = field(default_factory=list)
    """A few more distinct lines of the same sighting (evidence), bounded."""

    @property
    def entry(self) -> Entry:
        return self.match.entry


def scope_key(m: Match, head: Head) -> tuple[object, ...]:
    """What makes two lines of one entry the same sighting: the entry and every scope value the line names."""
    return (m.entry.id, head.host, head.pid, head.rank, head.dev, m.fields)


class Reader:
    """Read lines of any family from any number of sources; take :meth:`sightings` (or incidents, via
    :func:`amdtop.logread.build.build`) at any time."""

    def __init__(self, catalog: Catalog | None = None) -> None:
        self.matcher = Matcher(catalog or load_catalog())
        self._seen: dict[tuple[object, ...], Sighting] = {}
        self._files: dict[str, int] = {}
        self._clock: dict[str, float] = {}
        self._cont: dict[str, tuple[Sighting, int]] = {}
        """Per file: the sighting whose entry's continuation lines may follow, and how many more may."""
        self.dropped = 0
        """Matching lines of a new scope not kept because :data:`MAX_SIGHTINGS` were already held."""
        self.matched = 0

    def feed(self, line: str, file: str = "<memory>", lineno: int = 0) -> Sighting | None:
        """Read one line; returns its sighting where it is a catalog entry (noise included)."""
        if len(line) > MAX_LINE:
            return None
        if self._cont and file in self._cont and self._continue(line, file):
            return None
        if not self.matcher.may_match(line):
            return None  # the message sits inside the line: no anchor in the line, no entry in the message
        head = read_head(line)
        m = self.matcher.match(head.text, checked=True)
        if m is None:
            if head.time is not None:
                self._clock[file] = head.time
            return None
        s = self.add(m, head, line.strip(), file, lineno)
        if s is not None and m.entry.continuation is not None:
            self._cont[file] = (s, MAX_CONTINUATION)
        return s

    def _continue(self, line: str, file: str) -> bool:
        """Whether ``line`` continues the open sighting of ``file`` (its fields are added to it)."""
        s, left = self._cont.pop(file)
        cont = s.entry.continuation
        m = cont.search(line.rstrip("\n")) if cont is not None else None
        if m is None:
            return False
        have = {k for k, _v in s.match.fields}
        more = tuple((k, v) for k, v in m.groupdict().items() if v is not None and k not in have)
        if more:
            s.match = Match(s.match.entry, s.match.fields + more, s.match.start)
        if left > 1:
            self._cont[file] = (s, left - 1)
        return True

    def feed_lines(self, lines: Iterable[str], file: str = "<memory>", start: int = 1) -> None:
        """Read many lines of one source, numbered from ``start``."""
        for n, line in enumerate(lines, start):
            self.feed(line, file, n)

    def add(self, m: Match, head: Head, text: str, file: str, lineno: int) -> Sighting | None:
        """Record a matched line (for callers that matched it themselves)."""
        self.matched += 1
        if head.time is not None:
            self._clock[file] = head.time
        t = head.time if head.time is not None else self._clock.get(file)
        key = scope_key(m, head)
        s = self._seen.get(key)
        if s is not None:
            s.count += 1
            if t is not None:
                s.last_time = t
            if len(s.lines) < 3 and text != s.text and text not in s.lines:
                s.lines.append(text)
            return s
        if len(self._seen) >= MAX_SIGHTINGS:
            self.dropped += 1
            return None
        if file not in self._files:
            if len(self._files) >= MAX_FILES:
                self.dropped += 1
                return None
            self._files[file] = len(self._files)
        s = Sighting(
            match=m,
            head=head,
            text=text,
            file=file,
            line=lineno,
            order=(t if t is not None else -1.0, self._files[file], lineno),
            timed=t is not None,
            last_time=t,
        )
        self._seen[key] = s
        return s

    def sightings(self) -> list[Sighting]:
        """Every sighting, in the order of events: by time where every sighting has one, else by file and line."""
        out = list(self._seen.values())
        if out and all(s.timed for s in out):
            out.sort(key=lambda s: s.order)
        else:
            out.sort(key=lambda s: (s.order[1], s.order[2]))
        return out
