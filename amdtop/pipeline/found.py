"""Servers amdtop did not start, read as the supervisor reads its own workers.

Discovery (:mod:`amdtop.analysis.discover`) finds a hand-started vLLM or SGLang server with its layout, GPUs and rank
processes; :class:`FoundReader` adds what a look at an own worker adds (:mod:`amdtop.supervisor.observe`), at the
same cadence (every :data:`~amdtop.thresholds.WORKERS_EVERY_S`) and through the same calls: ``/health`` (SGLang's
``/model_info``) and ``/metrics`` through one :class:`~amdtop.supervisor.metrics.Prober` (every metric-name scheme it
reads), one ``stat`` read per rank process, and its log (:func:`amdtop.analysis.found_log.find_log`), which the log
monitor then follows like an own worker's. Between two looks a server's last look is handed again.
"""

from __future__ import annotations

import os
import signal
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from amdtop.analysis.found_log import FoundLog, find_log
from amdtop.analysis.found_port import reachable_url
from amdtop.errors import AmdtopError
from amdtop.health.rankproc import read_rank, settle_blocked
from amdtop.health.stall import DEAD_STATES, instant_health
from amdtop.logread.crashlog import crash_summary, rank_death
from amdtop.logread.rccl.container_log import ContainerLogDecoder, log_format
from amdtop.logread.rccl.journal import check_journal, is_journal, journal_tail
from amdtop.model import EngineStats, RankSample, WorkerHealth, WorkerState, WorkerStatus
from amdtop.procinfo import PROC, read_cmdline, start_time
from amdtop.secrets import mask_log_line
from amdtop.supervisor.metrics import Prober
from amdtop.supervisor.observe import sglang_ready
from amdtop.supervisor.state import tail_lines
from amdtop.thresholds import REDISCOVER_EVERY_S, WORKERS_EVERY_S

GONE_KEEP_S = 60.0
"""How long a found server whose processes ended stays in the frame (crashed or stopped, its log followed): it has
no launch record to be shown from afterwards, unlike an own worker."""


@dataclass(frozen=True, slots=True)
class _Look:
    """One look at a found server: what it adds to discovery's fields, and the discovery object it was laid on."""

    at: float
    base: WorkerStatus
    result: WorkerStatus


def _http_state(code: int | None, url: str | None) -> WorkerState:
    if url is None:
        return WorkerState.READY  # its processes run; where it listens is not known (discovery says why)
    if code == 200:
        return WorkerState.READY
    if code is not None and code >= 500:
        return WorkerState.CRASHED
    # vLLM binds its port early but listens only once ready: refused while it loads, as for an own worker.
    return WorkerState.STARTING


class FoundReader:
    """What discovery finds, read like an own worker: engine numbers, state, ranks, health, log."""

    def __init__(
        self,
        *,
        every_s: float = WORKERS_EVERY_S,
        clock: Callable[[], float] = time.monotonic,
        prober: Prober | None = None,
        proc_root: Path = PROC,
        http: bool | None = None,
    ) -> None:
        """``http``: probe the servers' URLs (default: only when ``proc_root`` is this host's: a captured process
        tree's servers are not on this host)."""
        self.every_s = every_s
        self.clock = clock
        self.prober = prober or Prober()
        self.proc_root = proc_root
        self.http = proc_root == PROC if http is None else http
        self._looks: dict[str, _Look] = {}
        self._seen: dict[str, dict[int, int]] = {}
        """Per server: rank -> pid of every rank seen, so a rank whose process vanished is still named (``gone``)."""
        self._urls: dict[int, tuple[float, str | None, str | None]] = {}
        self._journals: dict[str, tuple[float, str | None]] = {}
        """Per journal address: when journalctl was last checked, and why it cannot be followed (``None``: it can)."""
        self.looks: Counter[str] = Counter()
        """Looks taken so far, per server name (the tests count one server's: other servers on the host, found
        meanwhile, take looks of their own)."""

    def read(self, found: Sequence[WorkerStatus]) -> list[WorkerStatus]:
        """``found`` with each server's look laid on (a fresh one where the last is ``every_s`` old or its processes
        changed)."""
        now = self.clock()
        out = []
        for w in found:
            look = self._looks.get(w.name)
            if look is not None and look.base is w and now - look.at < self.every_s:
                out.append(look.result)
                continue
            if look is None or now - look.at >= self.every_s or look.base.pids != w.pids:
                look = _Look(now, w, self._look(w))
            else:  # discovery handed a new object with the same processes: the last look's fields on it
                look = _Look(look.at, w, _laid(w, look.result))
            self._looks[w.name] = look
            out.append(look.result)
        names = {w.name for w in found}
        for name in sorted(set(self._looks) - names):
            look = self._looks[name]
            if look.result.pids:  # it just ended: one look at what its log says, kept for GONE_KEEP_S
                look = self._looks[name] = _Look(now, look.base, self._ended(look.result))
            if now - look.at < GONE_KEEP_S:
                out.append(look.result)
                continue
            self._urls.pop(look.base.pid or 0, None)
            del self._looks[name]
            self._seen.pop(name, None)
            self.prober.forget(name)
        return out

    def _ended(self, last: WorkerStatus) -> WorkerStatus:
        """A found server whose processes are gone: crashed where its log says why (an error line, a rank that
        died), else stopped. Its log stays followed meanwhile, so the lines it wrote as it went (vLLM's "Worker proc
        VllmWorker-1 died unexpectedly") are read, as an own crashed worker's are."""
        seen = tuple(self._seen.get(last.name, {}).items())
        source = last.log or next(iter(last.other_logs), None)
        lines, error, health = crash_from_log(source, seen) if source else ((), None, None)
        crashed = error is not None or health is not None
        return replace(
            last, state=WorkerState.CRASHED if crashed else WorkerState.STOPPED, pids=(), pid=None, pgid=None,
            engine=None, ranks=(), health=health, error_line=error, last_log_lines=lines if crashed else (),
        )  # fmt: skip

    def _look(self, w: WorkerStatus) -> WorkerStatus:
        self.looks[w.name] += 1
        log = find_log(w.pid, self.proc_root) if w.pid else FoundLog(note="no API server process found")
        log = self._checked(log)
        url, where = self._url(w)
        state, engine = w.state, None
        if self.http and url is not None:
            code = sglang_ready(self.prober, url) if w.engine_kind == "sglang" else self.prober.health(url)
            state = _http_state(code, url)
            if state is WorkerState.READY:
                engine = self._engine(w, url)
                if engine is not None and engine.sleep_level is not None and engine.sleep_level > 0:
                    state = WorkerState.ASLEEP
        ranks = self._ranks(w)
        health: WorkerHealth | None = None
        error: str | None = None
        lines: tuple[str, ...] = ()
        died = any(r.state in DEAD_STATES for r in ranks)
        source = log.path or next(iter(log.follow), None)
        if (state is WorkerState.CRASHED or died) and source is not None:
            lines, error, health = crash_from_log(source, tuple(self._seen.get(w.name, {}).items()))
        if health is None and ranks and state is not WorkerState.ASLEEP:
            health = instant_health(ranks, w.name)
        return replace(
            w, state=state, engine=engine, ranks=ranks, health=health, log=log.path, other_logs=(*log.paths[1:], *log.follow),
            log_note=log.note, error_line=error, last_log_lines=lines, url=url, note=where or w.note,
        )  # fmt: skip

    def _checked(self, log: FoundLog) -> FoundLog:
        """``log`` with a journal it names checked (journalctl on PATH and reading it; again every
        :data:`REDISCOVER_EVERY_S`): one that cannot be followed is dropped and its note says why."""
        address = next((a for a in log.follow if is_journal(a)), None)
        if address is None:
            return log
        now = self.clock()
        held = self._journals.get(address)
        container = log.container is not None
        if held is None or now - held[0] >= REDISCOVER_EVERY_S:
            # a container's journal is only its log where its runtime's driver is journald: some line must be there
            held = self._journals[address] = (now, check_journal(address, need_entry=container))
        if held[1] is None:
            return log
        if log.container is not None:
            cid = log.container[:12]
            return replace(
                log, follow=(), note=f"in container {cid}: no runtime log file for it is readable, and its journal "
                f"cannot be followed: {held[1]} (docker logs {cid} may show it)",
            )  # fmt: skip
        where = log.note.split(": following ", 1)[0] if log.note else "its output goes to the journal"
        return replace(log, follow=(), note=f"{where}, which cannot be followed: {held[1]}")

    def _url(self, w: WorkerStatus) -> tuple[str | None, str | None]:
        """The URL the server answers at from here (a container's published port), looked up again every
        :data:`REDISCOVER_EVERY_S` (a proxy lookup walks the host's processes, and only for a container's server)."""
        if not w.pid:
            return w.url, None
        now = self.clock()
        held = self._urls.get(w.pid)
        if held is None or now - held[0] >= REDISCOVER_EVERY_S:
            held = self._urls[w.pid] = (now, *reachable_url(w.pid, w.port, w.url, self.proc_root))
        return held[1], held[2]

    def _engine(self, w: WorkerStatus, url: str) -> EngineStats | None:
        engine = self.prober.scrape(w.name, url)
        if engine is not None and w.pid and "--enable-server-load-tracking" in read_cmdline(w.pid, self.proc_root):
            # as for an own worker launched with it (launchspec.tracks_load): /load counts requests before a token
            engine = replace(engine, requests_accepted=self.prober.load(url))
        return engine

    def _ranks(self, w: WorkerStatus) -> tuple[RankSample, ...]:
        """Each rank's process now (one ``stat`` read each); a rank seen before whose process is gone reads
        ``gone`` under its last pid."""
        seen = self._seen.setdefault(w.name, {})
        seen.update(dict(w.rank_pids))
        ranks = tuple(read_rank(rank, pid, proc=self.proc_root, clock=self.clock) for rank, pid in sorted(seen.items()))
        return settle_blocked(ranks, proc=self.proc_root, clock=self.clock)

    def close(self) -> None:
        """Nothing is held between looks (the prober opens a connection per call)."""
        self.prober.close()


def crash_from_log(
    log: str, rank_pids: Sequence[tuple[int, int]]
) -> tuple[tuple[str, ...], str | None, WorkerHealth | None]:
    """``(last lines, error line, health)`` a crashed server's log gives, as an own worker's crash is read
    (:mod:`amdtop.logread.crashlog`: the error line, the rank vLLM says died), secrets masked. ``log``: a file, a
    container runtime's log file (decoded) or a journal address (its last entries)."""
    if is_journal(log):
        tail: Sequence[str] = journal_tail(log, 400)
    else:
        tail = tail_lines(Path(log), 400, max_bytes=256 * 1024)
        fmt = log_format(Path(log))
        if fmt is not None:
            tail = ContainerLogDecoder(fmt).feed(tail)
    lines = tuple(mask_log_line(line) for line in tail[-20:])
    summary = crash_summary(tail)
    error = None if summary is None else mask_log_line(summary)
    death = rank_death(tail)
    if death is None:
        return lines, error, None
    message = mask_log_line(f"{death.describe()}; the server crashed: {death.line.strip()}")
    health = WorkerHealth("rank_dead", death.rank, dict(rank_pids).get(death.rank), message, (death.line.strip(),))
    return lines, message, health


def _laid(w: WorkerStatus, look: WorkerStatus) -> WorkerStatus:
    return replace(
        w, state=look.state, engine=look.engine, ranks=look.ranks, health=look.health, log=look.log,
        other_logs=look.other_logs, log_note=look.log_note, error_line=look.error_line,
        last_log_lines=look.last_log_lines, url=look.url, note=look.note,
    )  # fmt: skip


def stop_found_server(worker: WorkerStatus) -> str:
    """SIGTERM a found server's API server (vLLM and SGLang shut their engines down on it), after checking the pid
    still names the process found (its start time); the outcome as one line. amdtop sweeps nothing it did not start:
    a server that ignores TERM is left to its owner (``k`` in the Processes pane sends KILL after a second TERM)."""
    pid = worker.pid
    if not pid or worker.source != "discovered":
        raise AmdtopError(f"{worker.name}: not a running server amdtop found")
    started = start_time(pid)
    if started is None or (worker.started_at is not None and abs(started - worker.started_at) > 1.0):
        raise AmdtopError(f"{worker.name}: pid {pid} has exited or now names another process; nothing sent")
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        raise AmdtopError(f"{worker.name}: pid {pid} has exited") from None
    except PermissionError:
        raise AmdtopError(f"{worker.name}: pid {pid} is another user's; run amdtop as that user or as root") from None
    return f"{worker.name}: TERM sent to its API server (pid {pid}); it shuts its engine down"
