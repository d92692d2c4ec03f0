"""One object for the UI's poller: follow the logs, parse them as they come, summarise and flag."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from amdtop.logread.rccl.container_log import ContainerLogDecoder, log_format
from amdtop.logread.rccl.diagnose import comm_label, comm_summary, diagnose
from amdtop.logread.rccl.init_watch import InitWatch
from amdtop.logread.rccl.lines import LineRun, LogLine, LogLines
from amdtop.logread.rccl.parser import LogParser
from amdtop.logread.rccl.report import LogReport
from amdtop.logread.rccl.tail import LogFollower, PathSpec
from amdtop.logread.rccl.unwrap import untear
from amdtop.logread.rccl.views import ViewCache, WorkerLogs, worker_logs
from amdtop.model import Flag, Topology
from amdtop.thresholds import NCCL_INIT_STALL_S


@dataclass(frozen=True, slots=True)
class LogUpdate:
    """What one :meth:`LogMonitor.poll` yields: the new tail lines and the whole current state of every worker's logs."""

    lines: LogLines | Sequence[LogLine]
    """New lines for the tail, oldest first (:class:`LogLines` from the follower: each built when read; named in the
    type so that the wire's protocol, read off these types, carries it)."""
    dropped: int
    """Lines skipped because the consumer lagged."""
    workers: tuple[WorkerLogs, ...]
    """Per worker: communicators (ranks, GPUs, every pair's transport), grouped warnings, counts, flags."""
    flags: tuple[Flag, ...]
    """Every current log-derived flag (errors, timeouts, transport fallbacks), each with its worker and GPUs."""
    new_flags: tuple[Flag, ...]
    """Flags that appeared in this poll: show them at once."""
    summary: str = ""
    """One line per communicator per worker (``llama-a: RCCL 2.20.5 comm-1: 4 ranks, all pairs P2P/IPC``)."""

    def counts(self) -> tuple[tuple[str, int, int], ...]:
        """``(worker, errors, warnings)`` per worker: what the exporter's ``amdtop_rccl_errors/_warnings`` report."""
        return tuple((w.worker, w.errors, w.warnings) for w in self.workers)

    def worker(self, name: str) -> WorkerLogs | None:
        """One worker's view, ``None`` before its first line."""
        return next((w for w in self.workers if w.worker == name), None)


LAUNCH_MARK = "=== amdtop launch "
"""The line the supervisor writes into a worker's log before each launch (amdtop/supervisor/core.py)."""


class LogMonitor:
    """Follower + incremental parser per worker + diagnosis. ``poll()`` is cheap and non-blocking (call it from a
    thread worker every 0.25-0.5 s and post the :class:`LogUpdate` to the UI)."""

    def __init__(
        self,
        sources: Sequence[PathSpec] | Callable[[], Sequence[PathSpec]],
        topology: Topology | None = None,
        *,
        max_lines: int = 5000,
        prime_bytes: int = 64 << 20,
        backlog_bytes: int = 256 << 10,
        init_stall_s: float = NCCL_INIT_STALL_S,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        """``init_stall_s``: how long a communicator's init may show no progress before ``nccl_init_stalled``;
        ``clock`` (monotonic) and ``wall`` are injected by tests."""
        self.follower = LogFollower(sources, max_lines=max_lines, backlog_bytes=backlog_bytes)
        self.prime_bytes = prime_bytes
        self.topology = topology
        self._parsers: dict[str, LogParser] = {}
        self._counts: dict[str, int] = {}
        self._flags: tuple[Flag, ...] = ()
        self._views: dict[str, WorkerLogs] = {}
        self._reports: dict[str, LogReport] = {}
        self._found: dict[str, tuple[Flag, ...]] = {}
        self._view_cache: dict[str, ViewCache] = {}
        self.init_watch = InitWatch(init_stall_s, clock, wall)
        self._last: LogUpdate | None = None

    def poll(self) -> LogUpdate:
        """Read, parse, diagnose."""
        batch = self.follower.poll()
        touched: set[str] = set()
        for worker, path, nbytes in self.follower.skipped_heads():
            # the tail starts near the end of a long log, but communicator init sits at its start: parse that part
            self._prime(worker, path, nbytes)
            touched.add(worker)
        touched |= self._feed(batch.lines.runs if isinstance(batch.lines, LogLines) else _runs(batch.lines))
        new: tuple[Flag, ...] = ()
        for worker in touched:
            # a report is rebuilt only for workers with new lines: the join runs per poll, not per line
            report = self._reports[worker] = self._parsers[worker].report()
            # a live log is not finished: an init without Init COMPLETE is judged by time (init_watch), not by EOF
            self._found[worker] = tuple(diagnose(report, self.topology, worker, finished=False))
            cache = self._view_cache.setdefault(worker, {})
            self._views[worker] = worker_logs(worker, report, self.topology, self._found[worker], cache)
        changed = bool(touched)
        for worker, report in self._reports.items():
            # every poll, lines or not: a stall is time passing without lines
            flags = (*self._found[worker], *self.init_watch.flags(worker, report, self.topology))
            if flags != self._views[worker].flags:
                self._views[worker] = replace(self._views[worker], flags=flags)
                changed = True
        # By worker name, not by whose line came first: the order of two workers starting together is a race.
        views = tuple(self._views[w] for w in sorted(self._views))
        if changed:
            flags = tuple(f for v in views for f in v.flags)
            old = set(self._flags)
            new = tuple(f for f in flags if f not in old)
            self._flags = flags
        last = self._last
        if (
            last is not None
            and not batch.lines
            and not batch.dropped
            and not new
            and not last.new_flags
            and not last.lines
            and not last.dropped
            and last.flags is self._flags
            and last.workers == views
        ):
            # Nothing moved: the same update again. A frame that holds the very object its predecessor held is
            # free to tell unchanged (a viewer takes it from its last frame instead of the wire: serve/wire.py).
            # Only an update that brought nothing (no line, no drop, no new flag) is handed again: the tail feeds
            # each update's lines and dropped count, which must not count twice.
            return last
        self._last = LogUpdate(batch.lines, batch.dropped, views, self._flags, new, self._summary(views))
        return self._last

    def _feed(self, runs: Sequence[LineRun]) -> set[str]:
        """Parse new tail lines in runs of one worker's file through the parser's batch loop (the fast path
        ``logs parse`` uses), each launch line starting a fresh parser. Returns the workers fed."""
        touched: set[str] = set()
        for worker, file, texts in runs:
            if LAUNCH_MARK in "\n".join(texts):
                cuts = [k for k, text in enumerate(texts) if text.startswith(LAUNCH_MARK)]
            else:
                cuts = []
            for a, b in zip([0, *cuts], [*cuts, len(texts)], strict=True):
                if a == b:
                    continue
                parser = self._parsers.get(worker)
                if parser is None or texts[a].startswith(LAUNCH_MARK):
                    # a new launch of the worker: its communicators replace the last run's (new pids, new pointers)
                    parser = self._parsers[worker] = LogParser()
                    self.init_watch.forget(worker)
                start = self._counts.get(file, 0) + 1
                # two processes writing one log tear lines: rejoin them before they are read (cheap when none is)
                parser.feed_lines(untear(texts if b - a == len(texts) else texts[a:b]), file, start)
                self._counts[file] = start - 1 + (b - a)
            touched.add(worker)
        return touched

    def _prime(self, worker: str, path: Path, nbytes: int) -> None:
        parser = self._parsers.get(worker)
        if parser is None:
            parser = self._parsers[worker] = LogParser()
        try:
            with open(path, "rb") as fh:
                head = fh.read(min(nbytes, self.prime_bytes))
        except OSError:
            return
        lines = head.decode("utf-8", "replace").split("\n")
        if nbytes > self.prime_bytes:
            lines.pop()  # cut mid-line
        fmt = log_format(path)
        if fmt is not None:  # a container runtime's log: the container's own lines, as the tail hands them
            lines = ContainerLogDecoder(fmt).feed(lines)
        name = str(path)
        start = self._counts.get(name, 0) + 1
        last = max((i for i, text in enumerate(lines) if text.startswith(LAUNCH_MARK)), default=None)
        if last is not None:
            # only the newest launch in the head describes the running worker
            parser = self._parsers[worker] = LogParser()
            self.init_watch.forget(worker)
            parser.feed_lines(lines[last:], name, start + last)
        else:
            parser.feed_lines(lines, name, start)
        # line numbers of the tail continue after the primed head (approximate when the head was capped)
        self._counts[name] = self._counts.get(name, 0) + len(lines)

    def report(self, worker: str) -> LogReport | None:
        """The parsed report of one worker so far (``None`` before its first line)."""
        parser = self._parsers.get(worker)
        return parser.report() if parser else None

    @staticmethod
    def _summary(views: tuple[WorkerLogs, ...]) -> str:
        out = []
        for w in views:
            lib = f"{w.library or ''} {w.version or ''}".strip()
            for c in w.comms:
                label = c.id if c.id.startswith("comm-") else f"comm {c.id}"
                out.append(f"{w.worker}: {lib} {label}: {c.summary}".replace(":  ", ": "))
            if w.errors:
                out.append(f"{w.worker}: {w.errors} error(s)")
        return "\n".join(out)

    def summary(self, worker: str | None = None) -> str:
        """Per-communicator lines for one worker or all; empty before any communicator was seen."""
        out = []
        for name, parser in self._parsers.items():
            if worker is not None and name != worker:
                continue
            rep = parser.report()
            lib = f"{rep.library or ''} {rep.version or ''}".strip()
            for comm in rep.comms:
                line = f"{name}: {lib} {comm_label(comm)}: {comm_summary(comm, self.topology)}"
                out.append(line.replace(":  ", ": "))
            if rep.errors:
                out.append(f"{name}: {len(rep.errors)} error(s), last: {rep.errors[-1].text[:120]}")
        return "\n".join(out)

    def close(self) -> None:
        """Close the files."""
        self.follower.close()


def _runs(lines: Sequence[LogLine]) -> list[LineRun]:
    """Consecutive lines of one worker's file as runs (a batch built by hand rather than by the follower)."""
    out: list[tuple[str, str, list[str]]] = []
    for line in lines:
        if out and out[-1][0] == line.worker and out[-1][1] == line.file:
            out[-1][2].append(line.text)
        else:
            out.append((line.worker, line.file, [line.text]))
    return [LineRun(worker, file, tuple(texts)) for worker, file, texts in out]
