"""One object for the UI's poller: follow the logs, parse them as they come, summarise and flag."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from amdtop.model import Flag, Topology
from amdtop.rccl.diagnose import diagnose
from amdtop.rccl.lines import LogLine
from amdtop.rccl.parser import LogParser
from amdtop.rccl.report import LogReport
from amdtop.rccl.tail import LogFollower, PathSpec


@dataclass(frozen=True, slots=True)
class LogUpdate:
    """What one :meth:`LogMonitor.poll` yields."""

    lines: tuple[LogLine, ...]
    """New lines for the tail."""
    dropped: int
    """Lines skipped because the consumer lagged."""
    summary: str
    """One line per communicator per worker (``llama-a: comm 0x…: 4 ranks, all pairs P2P/IPC``)."""
    flags: tuple[Flag, ...]
    """Every current flag (errors, timeouts, transport fallbacks)."""
    new_flags: tuple[Flag, ...]
    """Flags that appeared in this poll: show them at once."""

    @property
    def dropped_count(self) -> int:
        """Alias of :attr:`dropped`, so a monitor can stand in for a bare :class:`LogFollower`."""
        return self.dropped


class LogMonitor:
    """Follower + incremental parser per worker + diagnosis. ``poll()`` is cheap and non-blocking (call it from a
    thread worker every 0.25-0.5 s and post the :class:`LogUpdate` to the UI)."""

    def __init__(
        self,
        sources: Sequence[PathSpec] | Callable[[], Sequence[PathSpec]],
        topology: Topology | None = None,
        *,
        max_lines: int = 5000,
    ) -> None:
        self.follower = LogFollower(sources, max_lines=max_lines)
        self.topology = topology
        self._parsers: dict[str, LogParser] = {}
        self._counts: dict[str, int] = {}
        self._flags: tuple[Flag, ...] = ()

    def poll(self) -> LogUpdate:
        """Read, parse, diagnose."""
        batch = self.follower.poll()
        touched: set[str] = set()
        for line in batch.lines:
            parser = self._parsers.get(line.worker)
            if parser is None:
                parser = self._parsers[line.worker] = LogParser()
            n = self._counts.get(line.file, 0) + 1
            self._counts[line.file] = n
            parser.files.add(line.file)
            parser.feed(line.text, line.file, n)
            touched.add(line.worker)
        new: tuple[Flag, ...] = ()
        if touched:
            flags: list[Flag] = []
            for worker, parser in self._parsers.items():
                flags.extend(diagnose(parser.report(), self.topology, worker))
            old = set(self._flags)
            new = tuple(f for f in flags if f not in old)
            self._flags = tuple(flags)
        return LogUpdate(batch.lines, batch.dropped, self.summary(), self._flags, new)

    def report(self, worker: str) -> LogReport | None:
        """The parsed report of one worker so far (``None`` before its first line)."""
        parser = self._parsers.get(worker)
        return parser.report() if parser else None

    def summary(self, worker: str | None = None) -> str:
        """Per-communicator lines for one worker or all; empty before any communicator was seen."""
        out = []
        for name, parser in self._parsers.items():
            if worker is not None and name != worker:
                continue
            rep = parser.report()
            lib = f"{rep.library or ''} {rep.version or ''}".strip()
            for comm in rep.comms:
                out.append(f"{name}: {lib} comm {comm.id}: {comm.summary}".replace(":  comm", ": comm"))
            if rep.errors:
                out.append(f"{name}: {len(rep.errors)} error(s), last: {rep.errors[-1].text[:120]}")
        return "\n".join(out)

    def close(self) -> None:
        """Close the files."""
        self.follower.close()
