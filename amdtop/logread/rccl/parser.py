"""Incremental RCCL/NCCL log parser: feed lines from any mix of files, processes and hosts, then take a report.

The hot loop and INFO dispatch live here (INFO is most of a log); communicator lines fill per-process views in
:mod:`amdtop.logread.rccl.comm_lines`, joined into communicators by :mod:`amdtop.logread.rccl.join`; WARN and non-RCCL lines are
judged in :mod:`amdtop.logread.rccl.app_lines`; traces and warning groups in :mod:`amdtop.logread.rccl.verdicts`; files (plain or
compressed) are read by :mod:`amdtop.logread.rccl.files`.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence
from pathlib import Path

from amdtop.logread import Reader, build, merge
from amdtop.logread.kernel.logfile import KernelLineReader, job_catalog
from amdtop.logread.rccl import app_lines
from amdtop.logread.rccl import grammar as g
from amdtop.logread.rccl import phases as ph
from amdtop.logread.rccl.capped import Capped
from amdtop.logread.rccl.comm_lines import CommLines, suffix_ptr
from amdtop.logread.rccl.env import FAKE_VARS, is_known
from amdtop.logread.rccl.incidents import build_incidents_at
from amdtop.logread.rccl.join import FreezeCache, join
from amdtop.logread.rccl.nics import NicLines
from amdtop.logread.rccl.ranks import attribute
from amdtop.logread.rccl.report import EnvSetting, LogReport, Message
from amdtop.logread.rccl.state import ThreadKey, Trace
from amdtop.logread.rccl.verdicts import group_warnings, judge_traces, with_fatal_warns


class LogParser(CommLines):
    """Parse lines one at a time; never raises on content. Call :meth:`report` any time."""

    def __init__(self) -> None:
        super().__init__()
        self.nic_lines = NicLines()
        self._frozen: FreezeCache = {}
        self.fatal_warns: Capped[tuple[int, ThreadKey, Message]] = Capped()
        """Fatal WARNs (IPC handle, reverse path, proxy call...): errors unless a failed trace of their thread
        already reports them (the trace then carries the WARN's text)."""
        self.version: str | None = None
        self.versions: dict[str, str] = {}
        self.files: set[str] = set()
        self.lines = 0
        self.warnings: Capped[Message] = Capped()
        self.errors: Capped[tuple[int, Message]] = Capped()
        """``(seq, message)``: traces are judged at report time and merged back in order."""
        self.traces: Capped[Trace] = Capped()
        self.warn_seqs: dict[ThreadKey, list[int]] = {}
        self.env: dict[str, EnvSetting] = {}
        self._env_names: dict[str, str] = {}  # the echo line of a known variable -> its name
        self._env_msgs: dict[str, str] = {}  # a known variable -> the echo line that set its current value
        self.in_banner = False
        self.kernel = KernelLineReader()
        """Kernel lines in the same files (a saved dmesg, a journal): amdgpu and NVIDIA faults, read as the kernel
        path reads them."""
        self.facts: Capped[Message] = Capped()
        """Lines that build incidents (c10d progress, NET/IB completions, signals): :mod:`amdtop.logread.rccl.incidents`."""
        self.recent: dict[str, deque[str]] = {}
        """The last few non-INFO lines per process prefix (``""``: lines without one): a crash's evidence."""
        self.crash_after: dict[str, list[str]] = {}
        """Lines a process printed after its signal line, by process prefix."""
        self.catalog = Reader(job_catalog())
        """Every family of the message catalog (amdtop/logread), run on the lines that can carry a failure."""

    # -- entry points --------------------------------------------------------------------------------------------
    def feed_lines(self, lines: Iterable[str], file: str = "<memory>", start: int = 1) -> None:
        """Parse ``lines`` (with or without newlines) read from ``file``, numbering from ``start``."""
        self.files.add(file)
        self._base = self.lines - start + 1  # global sequence of line n is _base + n (init order across files)
        # the hot loop: INFO lines (most of a log) go straight to _info; locals avoid attribute lookups
        mark, limit, info, rest, channel = g.INFO_MARK, g.MAX_LINE, self._info, self._not_info, self._channel
        quiet = _QUIET_APP
        n = start - 1
        for n, line in enumerate(lines, start):
            if len(line) > limit:
                self.unknown += 1
                continue
            i = line.find(mark)
            if i >= 0:
                if line.startswith("Channel ", i + 11):
                    # the commonest line: ring listings are skipped, connections parsed, no slicing before that
                    if " via " in line:
                        channel(line, i, n)
                    elif "\ufffd" in line:  # free on ASCII lines: a str of a narrower kind is never searched
                        self.unknown += 1
                    continue
                info(line, i, file, n)
            elif not (line.startswith(quiet) and "nccl==" not in line):
                rest(line, file, n)
            # else: vLLM/Python INFO and DEBUG lines, known and factless
        self.lines += n - start + 1

    def feed(self, line: str, file: str, lineno: int) -> None:
        """Parse one line; unknown lines are counted."""
        self.lines += 1
        self._base = self.lines - lineno
        if len(line) > g.MAX_LINE:
            self.unknown += 1
            return
        i = line.find(g.INFO_MARK)
        if i >= 0:
            self._info(line, i, file, lineno)
            return
        self._not_info(line, file, lineno)

    def _not_info(self, line: str, file: str, lineno: int) -> None:
        self.trail_key = None
        self.catalog.feed(line, file, lineno)
        self.kernel.feed(line)
        if line[:1] == "[":
            m = g.LINE_NUMBER.match(line)
            if m:  # a log viewer's ``[12345] `` line number: the record starts after it
                line = line[m.end() :]
                i = line.find(g.INFO_MARK)
                if i >= 0:
                    self._info(line, i, file, lineno)
                    return
        if line.endswith("cluster]"):
            line = g.REPEATED.sub("", line)
        i = line.find(g.WARN_MARK)
        if i >= 0:
            self.in_banner = False
            app_lines.warn(self, line, i, i + len(g.WARN_MARK), file, lineno)
            return
        if line.find(g.TRACE_MARK) >= 0:
            return
        stripped = line.strip()
        if not stripped:
            return
        app_lines.other(self, stripped, file, lineno)

    def report(self) -> LogReport:
        """A frozen view of everything parsed so far."""
        comms = tuple(join(self.procs, self._frozen))
        rank_of = attribute(self.procs)
        library = self.library
        if library is None and (self.version or comms):
            library = "NCCL"
        judged = judge_traces(self.traces, self.procs, self.warn_seqs, self.errors)
        judged, fatal = with_fatal_warns(judged, self.traces, self.fatal_warns)
        notes = [rank_of(m) for _s, m, is_error in judged if not is_error]
        failed = ((s, m) for s, m, is_error in judged if is_error)
        errors = sorted([*self.errors, *fatal, *failed], key=lambda sm: sm[0])
        warnings = tuple(rank_of(m) for m in self.warnings)
        final = tuple(rank_of(m) for _s, m in errors)
        return LogReport(
            library=library,
            version=self.version,
            files=len(self.files),
            lines=self.lines,
            unknown_lines=self.unknown,
            comms=comms,
            transports=tuple(sorted(self.transports.items(), key=lambda kv: (-kv[1], kv[0]))),
            warnings=warnings,
            errors=final,
            env=tuple(self.env.values()),
            versions=tuple(sorted(self.versions.items())),
            notes=tuple(notes),
            warning_groups=group_warnings(warnings),
            nics=self.nic_lines.report(),
            dropped=self.warnings.dropped
            + self.errors.dropped
            + self.facts.dropped
            + self.traces.dropped
            + self.fatal_warns.dropped
            + self.catalog.dropped,
            incidents=(
                *merge(
                    build(self.catalog.sightings(), rank_of=self.named_rank),
                    build_incidents_at(self.facts, final, warnings, comms, self.crash_after, self.recent),
                ),
                *self.kernel.incidents(),
            ),
        )

    # -- INFO ----------------------------------------------------------------------------------------------------
    def _info(self, line: str, i: int, file: str, lineno: int) -> None:
        self.in_banner = False
        msg = line[i + 11 :]  # len(" NCCL INFO ")
        c = msg[:1]
        if c == "C" and msg.startswith("Channel "):
            if " via " in msg:
                self._channel(line, i, lineno)
            return
        if "\ufffd" in msg:
            # invalid bytes (free to test on ASCII lines): a corrupted RCCL line is counted, never half-trusted
            self.unknown += 1
            return
        if "ailed" in msg or "rror" in msg or "xited" in msg:
            self.catalog.feed(line, file, lineno)  # an INFO failure (a plugin, a socket): cheap words first
        msg = msg.rstrip()
        if c == "C":
            if msg.startswith("Connected all "):
                self._connected(line[:i], msg, lineno)
                return
        elif c == "c" and msg.startswith("comm 0x"):
            if " - " in msg:
                self._init(line[:i], msg, lineno)
                if msg.endswith("Abort COMPLETE"):
                    self._aborted(line[:i], msg, file, lineno)
            else:
                m = g.COMM_NODES.match(msg)
                if m:
                    pc = self._comm_for(line[:i], m.group(1), int(m.group(3)), lineno)
                    pc.nnodes = int(m.group(4))
                    if pc.rank is None:
                        pc.rank = int(m.group(2))
                    pc.phase = max(pc.phase, ph.TOPOLOGY)
            return
        elif c == "n" and msg.startswith("ncclComm"):
            if " - " in msg:
                self._init(line[:i], msg, lineno)
                if msg.endswith("Abort COMPLETE"):
                    self._aborted(line[:i], msg, file, lineno)
            return
        elif c == "T" and msg.startswith("Trees ") and "->" in msg:
            self._trees(line[:i], msg, lineno)
            return
        elif (
            (c == "N" and msg.startswith("NET/"))
            or (c == "U" and msg.startswith("Using network "))
            or (c == "I" and msg.startswith("Initializing NIC"))
        ):
            self.nic_lines.line(self.header(line[:i])[0], msg)
            return
        if msg.endswith(("-> 1", "-> 2", "-> 3", "-> 4", "-> 5", "-> 6", "-> 7", "[Async thread]")):
            self._trail(line, msg, file, lineno)
            return
        self.trail_key = None
        if " set by environment to " in msg:
            name = self._env_names.get(msg)
            if name is not None and self._env_msgs[name] == msg:
                return  # every rank echoes its settings at each init: a known variable's same value again
            if msg.endswith("cluster]"):
                msg = g.REPEATED.sub("", msg)  # Ray's ``[repeated 2x across cluster]``: never part of the value
            m = g.ENV_SET.match(msg)
            if m:
                name, value = m.group(1), m.group(2).rstrip(".").strip()
                known = is_known(name)
                self.env[name] = EnvSetting(name, value, known)
                if known:
                    self._env_names[msg], self._env_msgs[name] = name, msg
                if not known:
                    text = f"{name}={value} is unknown to RCCL/NCCL and ignored; {FAKE_VARS.get(name, 'remove it')}"
                    host, pid, _t, dev, _ = self.header(line[:i])
                    self.warnings.append(Message(file, lineno, text, "unknown_env", dev, (), host, pid, dev))
            return
        if "version" in msg:
            self.version_line(msg)
            return
        if msg.startswith("Init timings"):
            m = g.TIMINGS.search(msg)
            if m:
                pc = self._comm_for(line[:i], None, int(m.group(2)), lineno)
                pc.init_s = float(m.group(3))
                if pc.rank is None:
                    pc.printers.add(int(m.group(1)))
            return
        if c.isdigit() and " coll channels" in msg:
            m = g.COLL_CHANNELS.match(msg)
            if m:
                pc = self._comm_for(line[:i], suffix_ptr(msg), None, lineno)
                pc.coll_channels = int(m.group(1))
                pc.phase = max(pc.phase, ph.TUNING)

    def _aborted(self, head: str, msg: str, file: str, lineno: int) -> None:
        """``ncclCommAbort`` finished before the rank's init completed: the communicator failed, an error of the rank
        that printed it. After a completed init it is a teardown (PyTorch aborts its communicators on shutdown)."""
        host, pid, tid, dev, _ = self.header(head)
        pc = self.current_comm(host, pid, tid)
        if pc is not None and pc.complete_seq is not None:
            return
        text = msg.strip()
        message = Message(file, lineno, text, "comm_aborted", self.rank_of(host, pid, dev), (), host, pid, dev)
        self.fatal_warns.append((self.seq(lineno), (host, pid, None), message))

    def version_line(self, msg: str) -> None:
        """Library and version from an ``RCCL version`` / ``NCCL version`` line."""
        if "RCCL version" in msg:
            m = g.RCCL_VERSION.search(msg)
            self.library = "RCCL"
            if m:
                self.version = m.group(1)
            self.in_banner = True
        elif "NCCL version" in msg:
            m = g.NCCL_VERSION.search(msg)
            if m:
                self.version = self.version or m.group(1)
            if self.library is None:
                self.library = "NCCL"

    def _trail(self, line: str, msg: str, file: str, lineno: int) -> None:
        m = g.TRAIL.search(msg)
        if m is None:
            return
        key = (file, line[: line.find(g.INFO_MARK)])
        hop = f"{g.short_file(m.group(1))}:{m.group(2)}"
        seq = self._base + lineno
        if self.trail_key == key and self.traces:
            last = self.traces[-1]
            extra = dict(last.message.extra)
            extra["trail"] = (*extra.get("trail", ()), hop)
            old = last.message
            last.message = Message(
                old.file, old.line, old.text, old.kind, old.rank, tuple(extra.items()), old.host, old.pid, old.dev
            )
            last.last_seq = seq
            return
        self.trail_key = key
        code = m.group(3)
        text = f"{hop} -> {code} ({g.RESULTS.get(code, 'error')})"
        host, pid, tid, dev, _ = self.header(key[1])
        facts = (("result", int(code)), ("trail", (hop,)))
        message = Message(file, lineno, text, "error_trail", self.rank_of(host, pid, dev), facts, host, pid, dev)
        self.traces.append(Trace(message, (host, pid, tid), seq, seq, self.current_comm(host, pid, tid)))


_QUIET_APP = ("INFO ", "DEBUG ", "INFO:")


def parse_lines(lines: Iterable[str], file: str = "<memory>") -> LogReport:
    """Parse lines of one source and return the report."""
    p = LogParser()
    p.feed_lines(lines, file)
    return p.report()


def parse_files(paths: Sequence[Path | str]) -> LogReport:
    """See :func:`amdtop.logread.rccl.files.parse_files` (gzip/bzip2/xz read; other compressions refused by name)."""
    from amdtop.logread.rccl.files import parse_files as parse

    return parse(paths)
