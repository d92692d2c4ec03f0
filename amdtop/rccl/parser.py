"""Incremental RCCL/NCCL log parser: feed lines from any mix of files and ranks, then take a :class:`LogReport`."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TextIO

from amdtop.errors import InputError
from amdtop.rccl import grammar as g
from amdtop.rccl.env import FAKE_VARS, is_known
from amdtop.rccl.report import EnvSetting, LogReport, Message
from amdtop.rccl.state import CommState, freeze

_ERROR_WORDS = (
    "unhandled system error",
    "unhandled cuda error",
    "DistBackendError",
    "NCCL communicator was aborted",
    "ProcessRaisedException",
)


class LogParser:
    """Parse lines one at a time; never raises on content. Call :meth:`report` any time."""

    def __init__(self) -> None:
        self.library: str | None = None
        self.version: str | None = None
        self.versions: dict[str, str] = {}
        self.files: set[str] = set()
        self.lines = 0
        self.unknown = 0
        self._comms: dict[str, CommState] = {}
        self._by_ptr: dict[tuple[str | None, int | None, str], str] = {}
        self._by_thread: dict[tuple[str | None, int | None, int | None], str] = {}
        self._synthetic = 0
        self.transports: dict[str, int] = {}
        self.warnings: list[Message] = []
        self.errors: list[Message] = []
        self.env: dict[str, EnvSetting] = {}
        self._in_banner = False
        self._trail_key: tuple[str, str] | None = None
        self._heads: dict[str, tuple[str | None, int | None, int | None, int | None, str]] = {}
        self._chan_comm: dict[tuple[str, str | None], CommState] = {}

    # -- entry points --------------------------------------------------------------------------------------------
    def feed_lines(self, lines: Iterable[str], file: str = "<memory>", start: int = 1) -> None:
        """Parse ``lines`` (with or without newlines) read from ``file``, numbering from ``start``."""
        self.files.add(file)
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
                        channel(line, i)
                    continue
                info(line, i, file, n)
            elif not (line.startswith(quiet) and "nccl==" not in line):
                rest(line, file, n)
            # else: vLLM/Python INFO and DEBUG lines, known and factless
        self.lines += n - start + 1

    def feed(self, line: str, file: str, lineno: int) -> None:
        """Parse one line; unknown lines are counted."""
        self.lines += 1
        if len(line) > g.MAX_LINE:
            self.unknown += 1
            return
        i = line.find(g.INFO_MARK)
        if i >= 0:
            self._info(line, i, file, lineno)
            return
        self._not_info(line, file, lineno)

    def _not_info(self, line: str, file: str, lineno: int) -> None:
        self._trail_key = None
        i = line.find(g.WARN_MARK)
        if i >= 0:
            self._in_banner = False
            self._warn(line, i, i + len(g.WARN_MARK), file, lineno)
            return
        if line.find(g.TRACE_MARK) >= 0:
            return
        stripped = line.strip()
        if not stripped:
            return
        self._other(stripped, file, lineno)

    def report(self) -> LogReport:
        """A frozen view of everything parsed so far."""
        comms = tuple(freeze(c) for c in self._comms.values())
        library = self.library
        if library is None and (self.version or comms):
            library = "NCCL"
        return LogReport(
            library=library,
            version=self.version,
            files=len(self.files),
            lines=self.lines,
            unknown_lines=self.unknown,
            comms=comms,
            transports=tuple(sorted(self.transports.items(), key=lambda kv: (-kv[1], kv[0]))),
            warnings=tuple(self.warnings),
            errors=tuple(self.errors),
            env=tuple(self.env.values()),
            versions=tuple(sorted(self.versions.items())),
        )

    # -- INFO ----------------------------------------------------------------------------------------------------
    def _info(self, line: str, i: int, file: str, lineno: int) -> None:
        self._in_banner = False
        msg = line[i + 11 :]  # len(" NCCL INFO ")
        c = msg[:1]
        if c == "C" and msg.startswith("Channel "):
            if " via " in msg:
                self._channel(line, i)
            return
        msg = msg.rstrip()
        if c == "C":
            if msg.startswith("Connected all "):
                self._connected(line[:i], msg)
                return
        elif c == "c" and msg.startswith("comm 0x"):
            if " - " in msg:
                self._init(line[:i], msg)
            else:
                m = g.COMM_NODES.match(msg)
                if m:
                    comm = self._comm_for(line[:i], m.group(1), int(m.group(3)))
                    comm.nnodes = int(m.group(4))
            return
        elif c == "n" and msg.startswith("ncclComm"):
            if " - " in msg:
                self._init(line[:i], msg)
            return
        if msg.endswith(("-> 1", "-> 2", "-> 3", "-> 4", "-> 5", "-> 6", "-> 7", "[Async thread]")):
            self._trail(line, msg, file, lineno)
            return
        self._trail_key = None
        if " set by environment to " in msg:
            m = g.ENV_SET.match(msg)
            if m:
                name, value = m.group(1), m.group(2).rstrip(".").strip()
                known = is_known(name)
                self.env[name] = EnvSetting(name, value, known)
                if not known:
                    text = f"{name}={value} is unknown to RCCL/NCCL and ignored; {FAKE_VARS.get(name, 'remove it')}"
                    self.warnings.append(Message(file, lineno, text, "unknown_env"))
            return
        if "version" in msg:
            self._version(msg)
            return
        if msg.startswith("Init timings"):
            m = g.TIMINGS.search(msg)
            if m:
                comm = self._comm_for(line[:i], None, int(m.group(2)))
                comm.rank(int(m.group(1))).init_s = float(m.group(3))
            return
        if c.isdigit() and " coll channels" in msg:
            m = g.COLL_CHANNELS.match(msg)
            if m:
                self._comm_for(line[:i], _suffix_ptr(msg), None).coll_channels = int(m.group(1))

    def _version(self, msg: str) -> None:
        if "RCCL version" in msg:
            m = g.RCCL_VERSION.search(msg)
            self.library = "RCCL"
            if m:
                self.version = m.group(1)
            self._in_banner = True
        elif "NCCL version" in msg:
            m = g.NCCL_VERSION.search(msg)
            if m:
                self.version = self.version or m.group(1)
            if self.library is None:
                self.library = "NCCL"

    def _header(self, head: str) -> tuple[str | None, int | None, int | None, int | None, str]:
        # the same few ``host:pid:tid [dev]`` heads repeat on most lines: cache their parse
        got = self._heads.get(head)
        if got is not None:
            return got
        m = g.HEADER.search(head)
        if m is None:
            got = (None, None, None, None, head)
        else:
            got = (m.group(1).split(".", 1)[0], int(m.group(2)), int(m.group(3)), int(m.group(4)), m.group(5) or "")
        if len(self._heads) > 4096:
            self._heads.clear()
        self._heads[head] = got
        return got

    def _comm_for(self, head: str, ptr: str | None, nranks: int | None) -> CommState:
        host, pid, tid, _dev, _ = self._header(head)
        key = None
        if ptr is not None:
            key = self._by_ptr.get((host, pid, ptr))
        if key is None:
            key = self._by_thread.get((host, pid, tid)) or self._by_thread.get((host, pid, None))
        if key is None:
            key = ptr or f"comm-{len(self._comms)}"
            if ptr is not None:
                self._by_ptr[(host, pid, ptr)] = key
            self._by_thread[(host, pid, tid)] = self._by_thread[(host, pid, None)] = key
        comm = self._comms.get(key)
        if comm is None:
            comm = self._comms[key] = CommState(key, nranks or 0)
        elif nranks and not comm.nranks:
            comm.nranks = nranks
        return comm

    def _init(self, head: str, msg: str) -> None:
        self._chan_comm.clear()
        m = g.COMM_INIT.search(msg)
        if m is None:
            if "Destroy COMPLETE" in msg or "Abort COMPLETE" in msg:
                ptr = msg.split(" ", 2)[1] if msg.startswith("comm ") else None
                self._comm_for(head, ptr, None).ended = "aborted" if "Abort" in msg else "destroyed"
            return
        host, pid, tid, _dev, _ = self._header(head)
        ptr, rank, nranks = m.group(1), int(m.group(2)), int(m.group(3))
        idm = g.COMM_ID.search(msg)
        key = idm.group(1) if idm else self._by_ptr.get((host, pid, ptr))
        if key is None:
            key = self._synthetic_key(rank, nranks)
        if key in self._comms and self._comms[key].nranks == 0:
            self._comms[key].nranks = nranks
        if key not in self._comms:
            # a comm first seen through its pointer (channel lines before Init) is renamed to its commId
            old = self._by_ptr.get((host, pid, ptr))
            provisional = old == ptr and old in self._comms
            self._comms[key] = self._comms.pop(old) if provisional and old else CommState(key, nranks)
            self._comms[key].key, self._comms[key].nranks = key, nranks
        self._by_ptr[(host, pid, ptr)] = key
        self._by_thread[(host, pid, tid)] = self._by_thread[(host, pid, None)] = key
        r = self._comms[key].rank(rank)
        r.dev, r.bus_id, r.host, r.pid = int(m.group(4)), g.norm_bus_id(m.group(5)), host, pid
        if "Init COMPLETE" in msg:
            r.complete = True
        elif "Destroy COMPLETE" in msg or "Abort COMPLETE" in msg:
            self._comms[key].ended = "aborted" if "Abort" in msg else "destroyed"

    def _synthetic_key(self, rank: int, nranks: int) -> str:
        # old logs without commId: ranks of one size join the newest synthetic comm until a rank repeats
        for key in reversed(self._comms):
            comm = self._comms[key]
            if key.startswith("comm-") and comm.nranks == nranks and rank not in comm.ranks:
                return key
        self._synthetic += 1
        return f"comm-{self._synthetic}"

    def _channel(self, line: str, i: int) -> None:
        self._trail_key = None
        m = g.CHANNEL.match(line, i + 11)
        if m is None:
            self.unknown += 1
            return
        ch, conn, src, sbus, dst, dbus, direction, transport, ptr, nr = m.groups()
        # channel lines come in runs from one thread: cache the comm per (head, ptr); Init lines clear the cache
        head = line[:i]
        comm = self._chan_comm.get((head, ptr))
        if comm is None:
            if self.library is None and ptr is not None:
                self.library = "RCCL"
            comm = self._comm_for(head, ptr, int(nr) if nr else None)
            self._chan_comm[(head, ptr)] = comm
        key = (src, dst, transport)
        seen = comm.edges.get(key)
        if seen is None:
            seen = comm.edges[key] = set()
            self._channel_ranks(comm, head, int(src), sbus, int(dst), dbus, direction, ptr)
        elif direction is not None:
            self._channel_ranks(comm, head, int(src), sbus, int(dst), dbus, direction, ptr)
        before = len(seen)
        # raw strings: ints are made once per edge at report time, not once per line
        seen.add((ch, conn, direction))
        if len(seen) > before:
            self.transports[transport] = self.transports.get(transport, 0) + 1

    def _channel_ranks(
        self, comm: CommState, head: str, s: int, sbus: str, d: int, dbus: str, direction: str | None, ptr: str | None
    ) -> None:
        src_info, dst_info = comm.rank(s), comm.rank(d)
        if ptr is not None:
            # rank[x] is a bus id in RCCL and old NCCL, a cudaDev in NCCL >= 2.19: only trust it with the comm suffix
            if src_info.bus_id is None:
                src_info.bus_id = g.norm_bus_id(sbus)
            if dst_info.bus_id is None:
                dst_info.bus_id = g.norm_bus_id(dbus)
        printer = dst_info if direction == "receive" else src_info
        if printer.host is None:
            host, pid, _tid, dev, _ = self._header(head)
            printer.host, printer.pid = host, pid
            if printer.dev is None:
                printer.dev = dev

    def _connected(self, head: str, msg: str) -> None:
        comm = self._comm_for(head, _suffix_ptr(msg), None)
        _host, _pid, _tid, dev, _ = self._header(head)
        mark = dev if dev is not None else len(comm.rings)
        (comm.rings if "rings" in msg else comm.trees).add(mark)

    def _trail(self, line: str, msg: str, file: str, lineno: int) -> None:
        m = g.TRAIL.search(msg)
        if m is None:
            return
        key = (file, line[: line.find(g.INFO_MARK)])
        hop = f"{g.short_file(m.group(1))}:{m.group(2)}"
        if self._trail_key == key and self.errors and self.errors[-1].kind == "error_trail":
            last = self.errors[-1]
            extra = dict(last.extra)
            extra["trail"] = (*extra.get("trail", ()), hop)
            self.errors[-1] = Message(last.file, last.line, last.text, last.kind, last.rank, tuple(extra.items()))
            return
        self._trail_key = key
        code = m.group(3)
        text = f"{hop} -> {code} ({g.RESULTS.get(code, 'error')})"
        host, pid, _t, dev, _ = self._header(key[1])
        facts = (("result", int(code)), ("trail", (hop,)))
        self.errors.append(Message(file, lineno, text, "error_trail", self._rank_of(host, pid, dev), facts))

    # -- WARN and the rest ---------------------------------------------------------------------------------------
    def _warn(self, line: str, i: int, j: int, file: str, lineno: int) -> None:
        text = line[j:].strip()
        host, pid, _tid, dev, where = self._header(line[:i])
        src = g.WARN_SOURCE.search(where)
        extra: tuple[tuple[str, object], ...] = ()
        if src:
            extra = (("source", f"{g.short_file(src.group(1))}:{src.group(2)}"),)
        if line.startswith("[") and line[1:5].isdigit():
            extra = (*extra, ("time", line[1 : line.find("]")]))
        self.warnings.append(Message(file, lineno, text, "warn", self._rank_of(host, pid, dev), extra))

    def _rank_of(self, host: str | None, pid: int | None, dev: int | None) -> int | None:
        # the rank a process holds in its newest communicator (one rank per process in vLLM/torchrun); else the dev
        comm = self._comms.get(self._by_thread.get((host, pid, None)) or "")
        if comm is not None and pid is not None:
            for r in comm.ranks.values():
                if r.pid == pid and r.host == host and (dev is None or r.dev is None or r.dev == dev):
                    return r.rank
        return dev

    def _other(self, s: str, file: str, lineno: int) -> None:
        if self._in_banner:
            m = g.BANNER_CONT.match(s)
            if m:
                self.versions[m.group(1)] = m.group(2)
                return
            if s.startswith(("Hostname", "Librccl path", "HIP version", "ROCm version")):
                return
            self._in_banner = False
        if s[:1] == "(":
            # vLLM process prefix ``(APIServer pid=1) `` / ``(VllmWorker TP0 pid=2) ``: judge what follows
            j = s.find(") ")
            if 0 < j < 80 and "pid=" in s[:j]:
                s = s[j + 2 :]
        if s.startswith("INFO:"):
            return  # uvicorn access/startup lines
        if s[:1] in _LEVEL_INITIALS and _is_app_log(s):
            # vLLM / Python logging: only the pynccl version line and ERROR/CRITICAL lines matter
            if s[0] == "I" and "nccl==" in s:
                m = g.VLLM_NCCL.search(s)
                if m:
                    self.versions["vllm-nccl"] = m.group(1)
                    self.version = self.version or m.group(1)
                return
            if s[0] not in "EC":
                return
        if "Watchdog caught" in s:
            m = g.WATCHDOG.search(s)
            if m:
                seq, op, _ni, _no, tmo, ran = m.groups()
                extra = (("seq", int(seq)), ("op", op), ("timeout_ms", int(tmo)), ("ran_ms", int(ran)))
                self.errors.append(Message(file, lineno, s, "watchdog_timeout", _torch_rank(s), extra))
                return
        if "NCCL Error" in s:
            m = g.NCCL_ERROR.search(s)
            if m:
                extra2 = (("result", int(m.group(1))),)
                self.errors.append(Message(file, lineno, s, "nccl_error", _torch_rank(s), extra2))
                return
        if "nccl==" in s:
            m = g.VLLM_NCCL.search(s)
            if m:
                self.versions["vllm-nccl"] = m.group(1)
                self.version = self.version or m.group(1)
                return
        if "NCCL version" in s or "RCCL version" in s:
            self._version(s)
            return
        if s[:1] in _LEVEL_INITIALS and _is_app_log(s):
            return
        for word in _ERROR_WORDS:
            if word in s:
                self.errors.append(Message(file, lineno, s, "exception", _torch_rank(s)))
                return
        if "ProcessGroupNCCL" in s or " WARN " in s:
            if " WARN " in s and "ProcessGroupNCCL" not in s:
                self.warnings.append(Message(file, lineno, s[s.find(" WARN ") + 6 :].strip(), "warn"))
            return
        self.unknown += 1


_READ_CHARS = 1 << 22
_QUIET_APP = ("INFO ", "DEBUG ", "INFO:")
_LEVEL_INITIALS = frozenset("IWDEC")
_APP_LEVELS = ("INFO ", "WARNING ", "DEBUG ", "ERROR ", "CRITICAL ")


def _is_app_log(s: str) -> bool:
    # vLLM / Python logging lines (``INFO 07-20 17:27:20 file.py:63] ...``): known, not NCCL
    return s.startswith(_APP_LEVELS) and s[s.find(" ") + 1 : s.find(" ") + 3].isdigit()


def _suffix_ptr(msg: str) -> str | None:
    if " comm 0x" not in msg:
        return None
    m = g.COMM_SUFFIX.search(msg)
    return m.group(1) if m else None


def _torch_rank(s: str) -> int | None:
    m = g.TORCH_RANK.search(s)
    if m is None:
        return None
    return int(m.group(1) or m.group(2))


def _feed_file(p: LogParser, fh: TextIO, name: str) -> None:
    # big reads split in C are much cheaper than readline per line; the cut line is carried to the next chunk
    p.files.add(name)
    carry = ""
    n = 1
    while True:
        chunk = fh.read(_READ_CHARS)
        if not chunk:
            break
        lines = (carry + chunk).split("\n") if carry else chunk.split("\n")
        carry = lines.pop()
        if len(carry) > g.MAX_LINE * 64:
            # a newline-free monster: count it as one unknown line and move on
            lines.append(carry[: g.MAX_LINE + 1])
            carry = ""
        p.feed_lines(lines, name, n)
        n += len(lines)
    if carry:
        p.feed_lines([carry], name, n)


def parse_lines(lines: Iterable[str], file: str = "<memory>") -> LogReport:
    """Parse lines of one source and return the report."""
    p = LogParser()
    p.feed_lines(lines, file)
    return p.report()


def parse_files(paths: Sequence[Path | str]) -> LogReport:
    """Parse every file (any mix of ranks and dialects) into one report.

    Raises:
        InputError: a file cannot be read (the message names it).
    """
    p = LogParser()
    for path in paths:
        name = str(path)
        try:
            # errors="replace": binary junk in a log must not stop the parse
            with open(path, encoding="utf-8", errors="replace", newline=None) as fh:
                _feed_file(p, fh, name)
        except OSError as exc:
            reason = exc.strerror or type(exc).__name__
            raise InputError(f"{name}: cannot read ({reason}); pass a readable RCCL/NCCL log file") from None
    return p.report()
