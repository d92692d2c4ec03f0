"""The lines an incident is built from, recorded as the parser reads them (c10d watchdog progress, NET/IB completion
errors, a process that died of a signal and the lines it printed before); :mod:`amdtop.logread.rccl.incidents` judges them."""

from __future__ import annotations

import re
from collections import deque
from typing import TYPE_CHECKING

from amdtop.logread.rccl import grammar as g
from amdtop.logread.rccl.report import Message

if TYPE_CHECKING:
    from amdtop.logread.rccl.parser import LogParser

RECENT = 4
"""Lines kept per process prefix as a crash's evidence (what it printed last)."""
AFTER = 8
"""Lines kept after a process's signal line (the faulting PC, the Python stack)."""
_CHEAP = ("SIG", "Fatal Python", "signal", "Segfault")
MAX_PROCESSES = 4096
"""Process prefixes whose last lines are remembered at most."""


def torch_context(s: str) -> tuple[tuple[str, object], ...]:
    """The process group and the glog time of a c10d line, where printed."""
    out: list[tuple[str, object]] = []
    m = g.PG_RANK.search(s)
    if m:
        name = m.group("name")
        out.append(("group", f"PG {m.group('pg')}" + (f" ({name})" if name else "")))
    t = g.TORCH_TIME.search(s)
    if t:
        day = int(t.group("mo")) * 31 + int(t.group("day"))
        at = day * 86400 + int(t.group("h")) * 3600 + int(t.group("m")) * 60 + float(t.group("s"))
        out.append(("at_s", at))
    return tuple(out)


def torch_progress(p: LogParser, s: str, rank: int | None, file: str, lineno: int) -> bool:
    """``... detected by watchdog at work: N, last enqueued NCCL work: M, last completed NCCL work: K``."""
    m = g.TORCH_PROGRESS.search(s)
    if m is None:
        return False
    extra = (("at", int(m.group("at"))), ("enqueued", int(m.group("enq"))), ("completed", int(m.group("done"))))
    if rank is None:
        pg = g.PG_RANK.search(s)
        rank = int(pg.group("rank")) if pg else None
    p.facts.append(Message(file, lineno, s, "torch_progress", rank, extra + torch_context(s)))
    return True


def desync_laggards(p: LogParser, s: str, file: str, lineno: int) -> bool:
    """A line of PyTorch's desync report naming the lagging ranks (the laggard, in the report's own words)."""
    m = g.DESYNC_LAGGARDS.search(s.strip())
    if m is None:
        return False
    text = m.group("ranks") or m.group("never") or ""
    ranks: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.strip().partition("-")
        if lo.isdigit() and (not hi or hi.isdigit()):
            top = int(hi) if hi else int(lo)
            if top - int(lo) > 4096:
                return False  # a range no job has: not a report line
            ranks += range(int(lo), top + 1)
    if not ranks:
        return False
    how = (
        "never joined a collective"
        if m.group("never")
        else (
            f"joined but did not finish collective #{m.group('seq')}"
            if m.group("seq")
            else f"did not join collective #{m.group('next')}"
        )
    )
    p.facts.append(Message(file, lineno, s.strip(), "desync_laggards", None, (("ranks", tuple(ranks)), ("how", how))))
    return True


def ib_completion(
    p: LogParser, text: str, host: str | None, pid: int | None, dev: int | None, file: str, lineno: int
) -> None:
    """A NET/IB completion error: ``[N]`` of its head is the local device; the rank only where the process named it."""
    m = g.IB_COMPLETION.search(text)
    if m is None:
        return
    peer = m.group("peer")
    extra: tuple[tuple[str, object], ...] = (
        ("status", int(m.group("status"))),
        ("opcode", int(m.group("opcode"))),
        ("vendor_err", int(m.group("vendor"))),
        ("peer", None if peer is None else peer.split("<", 1)[0]),
        ("direction", m.group("dir")),
    )
    p.facts.append(Message(file, lineno, text, "ib_completion", p.named_rank(host, pid, dev), extra, host, pid, dev))


def crash_line(p: LogParser, s: str, prefix: re.Match[str] | None, file: str, lineno: int) -> bool:
    """Record a signal death (True: the line is read) or keep the line as its process's recent output."""
    key = prefix.group(0) if prefix else ""
    if "died unexpectedly" in s and (d := g.VLLM_WORKER_DIED.search(s)) is not None:
        code = d.group("code")
        died: tuple[tuple[str, object], ...] = (("exit_code", None if code in (None, "None") else int(code)),)
        p.facts.append(Message(file, lineno, s, "worker_died", int(d.group("rank")), (*died, ("key", key))))
        return True
    if not any(c in s for c in _CHEAP):
        _remember(p, key, s)
        return False
    m = g.signal_line(s)
    if m is not None:
        sig = m.field("sig") or g.SIGNAL_OF.get(m.field("what") or "", "SIGSEGV")
        pid_text = prefix.group("pid") if prefix else m.field("pid")
        pid = int(pid_text) if pid_text else None
        name = prefix.group("name").strip() if prefix else None
        rank = None
        if name:
            tp = g.TP_RANK.search(name)
            rank = int(tp.group(1)) if tp else None
        if rank is None and pid is not None:
            rank = p.rank_of_pid(pid)
        before = tuple(p.recent.get(key, ()))
        p.recent.pop(key, None)
        extra = (("signal", sig), ("process", name), ("before", before), ("key", key))
        host = prefix.group("ip") if prefix else None
        p.facts.append(Message(file, lineno, s, "signal", rank, extra, host, pid))
        if len(p.crash_after) < MAX_PROCESSES:
            p.crash_after.setdefault(key, [])
        return True
    _remember(p, key, s)
    return False


def _remember(p: LogParser, key: str, s: str) -> None:
    after = p.crash_after.get(key)
    if after is not None and len(after) < AFTER:
        after.append(s[:300])  # what a dying process printed after the signal: the faulting function, its stack
    recent = p.recent.get(key)
    if recent is None:
        if len(p.recent) >= MAX_PROCESSES:
            return  # a log naming more processes than any node runs: the ones after are not remembered
        recent = p.recent[key] = deque(maxlen=RECENT)
    recent.append((key + s)[:300])  # with its process prefix: evidence says who printed it
