"""Lines without ``NCCL INFO``: WARNs, banner continuations, PyTorch watchdog and NCCL errors, vLLM/Python logging."""

from __future__ import annotations

from typing import TYPE_CHECKING

from amdtop.logread.rccl import grammar as g
from amdtop.logread.rccl import incident_facts as facts
from amdtop.logread.rccl.capped import MAX_KEPT, Capped
from amdtop.logread.rccl.report import Message
from amdtop.logread.rccl.verdicts import is_advisory

if TYPE_CHECKING:
    from amdtop.logread.rccl.parser import LogParser

_ERROR_WORDS = (
    "unhandled system error",
    "unhandled cuda error",
    "DistBackendError",
    "NCCL communicator was aborted",
    "ProcessRaisedException",
)
_LEVEL_INITIALS = frozenset("IWDEC")
_APP_LEVELS = ("INFO ", "WARNING ", "DEBUG ", "ERROR ", "CRITICAL ")


def warn(p: LogParser, line: str, i: int, j: int, file: str, lineno: int) -> None:
    """A ``NCCL WARN`` line: message, source location, timestamp, rank and process."""
    text = line[j:].strip()
    host, pid, tid, dev, where = p.header(line[:i])
    src = g.WARN_SOURCE.search(where)
    extra: tuple[tuple[str, object], ...] = ()
    if src:
        extra = (("source", f"{g.short_file(src.group(1))}:{src.group(2)}"),)
    if line.startswith("[") and line[1:5].isdigit():
        extra = (*extra, ("time", line[1 : line.find("]")]))
    rank = p.rank_of(host, pid, dev)
    p.warnings.append(Message(file, lineno, text, "warn", rank, extra, host, pid, dev))
    if "Got completion" in text:
        facts.ib_completion(p, text, host, pid, dev, file, lineno)
    if not is_advisory(text):
        seqs = p.warn_seqs.get((host, pid, tid))
        if seqs is None and len(p.warn_seqs) < MAX_KEPT:
            seqs = p.warn_seqs[(host, pid, tid)] = Capped()
        if seqs is not None:
            seqs.append(p.seq(lineno))
        if g.ends_communicator(text):
            # IPC handles, reverse paths, proxy calls: the communicator cannot work, whether or not a trail follows
            fatal = Message(file, lineno, text, "fatal_warn", rank, extra, host, pid, dev)
            p.fatal_warns.append((p.seq(lineno), (host, pid, tid), fatal))


def fatal_error(p: LogParser, s: str, file: str, lineno: int) -> None:
    """``node [1] [FATAL ERROR]: HIP failure: 'invalid argument'``: RCCL's abort line, with the printing rank."""
    i = s.find(g.FATAL_MARK)
    host, pid, _tid, dev, _ = p.header(s[:i].rstrip()) if i > 0 else (None, None, None, None, "")
    text = s[i:].strip()
    p.errors.append(
        (p.seq(lineno), Message(file, lineno, text, "fatal_error", p.rank_of(host, pid, dev), (), host, pid, dev))
    )


def other(p: LogParser, s: str, file: str, lineno: int) -> None:
    """Any other non-empty line (stripped): judged, or counted as unknown."""
    if p.in_banner:
        m = g.BANNER_CONT.match(s)
        if m:
            p.versions[m.group(1)] = m.group(2)
            return
        if s.startswith(("Hostname", "Librccl path", "HIP version", "ROCm version")):
            return
        p.in_banner = False
    prefix = None
    if s[:1] == "(":
        # vLLM/Ray process prefix ``(APIServer pid=1) `` / ``(RayWorkerWrapper pid=2, ip=...) ``: judge what follows
        j = s.find(") ")
        if 0 < j < 120 and "pid=" in s[:j]:
            prefix = g.APP_PREFIX.match(s)
            s = s[j + 2 :]
    if facts.crash_line(p, s, prefix, file, lineno):
        return
    if g.FATAL_MARK in s:
        fatal_error(p, s, file, lineno)
        return
    if s.startswith(("INFO:", "#", "=== amdtop launch ")):
        return  # uvicorn access/startup lines; nccl-tests/rccl-tests headers, fixture sources; amdtop's launch line
    if s[:1] in _LEVEL_INITIALS and _is_app_log(s):
        # vLLM / Python logging: only the pynccl version line and ERROR/CRITICAL lines matter
        if s[0] == "I" and "nccl==" in s:
            _vllm_nccl(p, s)
            return
        if s[0] not in "EC":
            return
    if "Watchdog caught" in s:
        m = g.WATCHDOG.search(s)
        if m:
            s = _own_record(s, m.start())
            m = g.WATCHDOG.search(s)
        if m:
            seq, op, _ni, _no, tmo, ran = m.groups()
            extra: tuple[tuple[str, object], ...] = (
                ("seq", int(seq)),
                ("op", op),
                ("timeout_ms", int(tmo)),
                ("ran_ms", int(ran)),
                *facts.torch_context(s),
            )
            p.errors.append((p.seq(lineno), Message(file, lineno, s, "watchdog_timeout", _torch_rank(s), extra)))
            return
    if "last completed NCCL work" in s:
        m = g.TORCH_PROGRESS.search(s)
        if m:
            s = _own_record(s, m.start())
        if facts.torch_progress(p, s, _torch_rank(s), file, lineno):
            return
    if ("didn't" in s or "lagging ranks" in s) and facts.desync_laggards(p, s, file, lineno):
        return
    if "NCCL Error" in s:
        err = g.torch_nccl_error(s)
        if err:
            extra2 = (("result", int(err.field("result") or 0)),)
            p.errors.append((p.seq(lineno), Message(file, lineno, s, "nccl_error", _torch_rank(s), extra2)))
            return
    if "nccl==" in s and _vllm_nccl(p, s):
        return
    if "NCCL version" in s or "RCCL version" in s:
        p.version_line(s)
        return
    if s[:1] in _LEVEL_INITIALS and _is_app_log(s):
        return
    for word in _ERROR_WORDS:
        if word in s:
            p.errors.append((p.seq(lineno), Message(file, lineno, s, "exception", _torch_rank(s))))
            return
    if "ProcessGroupNCCL" in s or " WARN " in s:
        if " WARN " in s and "ProcessGroupNCCL" not in s:
            p.warnings.append(Message(file, lineno, s[s.find(" WARN ") + 6 :].strip(), "warn"))
        return
    p.unknown += 1


def _vllm_nccl(p: LogParser, s: str) -> bool:
    m = g.VLLM_NCCL.search(s)
    if m is None:
        return False
    p.versions["vllm-nccl"] = m.group(1)
    p.version = p.version or m.group(1)
    return True


def _is_app_log(s: str) -> bool:
    # vLLM / Python logging lines (``INFO 07-20 17:27:20 file.py:63] ...``): known, not NCCL
    return s.startswith(_APP_LEVELS) and s[s.find(" ") + 1 : s.find(" ") + 3].isdigit()


def _own_record(s: str, at: int) -> str:
    """The record of ``s`` the match at ``at`` belongs to: from the last c10d record start before it. Where two
    processes wrote into one line, the first one's head must not lend its rank to the second one's SeqNum."""
    start = 0
    for m in g.TORCH_RECORD.finditer(s, 0, at):
        if m.start() > start and not (s[m.start() - 1 : m.start()] == ":" or s[m.start() - 2 : m.start()] == "] "):
            start = m.start()  # a record start not glued to the one before it (``[rank1]:[E..] [Rank 1]``)
    return s[start:] if start else s


def _torch_rank(s: str) -> int | None:
    m = g.TORCH_RANK.search(s)
    if m is None:
        return None
    return int(m.group(1) or m.group(2))
