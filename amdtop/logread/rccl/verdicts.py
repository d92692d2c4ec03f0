"""Verdicts on what the parser collected: return-code traces (error or note) and identical warnings grouped.

A trace (``NCCL INFO <file>:<line> -> <code>``) is an error when it leads to a WARN, a failed or aborted init,
``Abort COMPLETE``, or a communicator that never completes while others go on; otherwise it is a probe that failed
and fell back (amd.md §6: an 8-rank MI300X job printed ``net_ib.cc:652 -> 2`` once per rank, then connected every ring).
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from dataclasses import replace

from amdtop.logread.rccl.report import Message, WarningGroup
from amdtop.logread.rccl.state import ProcComm, ProcKey, ThreadKey, Trace

WARN_WINDOW = 50
"""A WARN this many lines (of the whole input) before or after a trace on the same thread is its cause or outcome."""
ADVISORY = ('Missing "', "NUMA auto balancing", "Dmabuf")
"""RCCL's startup advice WARNs: printed by healthy jobs, so never the cause of a trace."""


def is_advisory(text: str) -> bool:
    """True for RCCL's startup advice (kernel command line, environment, NUMA balancing)."""
    return text.startswith(ADVISORY)


def judge_traces(
    traces: Sequence[Trace],
    procs: Sequence[ProcComm],
    warn_seqs: Mapping[ThreadKey, list[int]],
    errors: Sequence[tuple[int, Message]] = (),
) -> list[tuple[int, Message, bool]]:
    """``(seq, message, is_error)`` per trace, in order; the reason is in the message's ``extra['verdict']``.

    ``errors`` are the other errors with their sequence numbers (NCCL Error, exceptions, watchdog timeouts);
    ``warn_seqs`` lists, per thread, the sequence numbers of its non-advisory WARNs in increasing order.
    """
    ctx = _Context(procs, errors)
    out: list[tuple[int, Message, bool]] = []
    for t in traces:
        reason = _near_warn(t, warn_seqs) or ctx.reason(t) or ctx.cascade(t)
        if reason:
            ctx.last_failed[t.thread[:2]] = t
        m = t.message
        verdict = (("verdict", reason or "nothing failed after it (a probe that fell back)"),)
        kind = m.kind if reason else "trace_note"
        out.append(
            (
                t.first_seq,
                Message(m.file, m.line, m.text, kind, m.rank, m.extra + verdict, m.host, m.pid, m.dev),
                bool(reason),
            )
        )
    return out


def _near_warn(t: Trace, warn_seqs: Mapping[ThreadKey, list[int]]) -> str | None:
    seqs = warn_seqs.get(t.thread)
    if seqs:
        i = bisect.bisect_left(seqs, t.first_seq - WARN_WINDOW)
        if i < len(seqs) and seqs[i] <= t.last_seq + WARN_WINDOW:
            return "a WARN on the same thread"
    return None


class _Context:
    """Indexes over the whole parse, built once per report so each trace is judged in O(log n)."""

    def __init__(self, procs: Sequence[ProcComm], errors: Sequence[tuple[int, Message]]) -> None:
        self.by_proc: dict[ProcKey, list[ProcComm]] = {}
        for pc in procs:
            self.by_proc.setdefault(pc.proc, []).append(pc)
        self.completed = {pc.proc for pc in procs if pc.complete_seq is not None}
        self.error_seqs: dict[str, list[tuple[int, str]]] = {}
        for seq, m in sorted(errors, key=lambda sm: sm[0]):
            self.error_seqs.setdefault(m.file, []).append((seq, m.kind))
        self.last_failed: dict[ProcKey, Trace] = {}

    def reason(self, t: Trace) -> str | None:
        proc = t.thread[:2]
        mine = self.by_proc.get(proc, [])
        if any(pc.ended == "aborted" for pc in mine):
            return "its communicator was aborted"
        target = t.comm or next((pc for pc in mine if pc.seq >= t.first_seq), None)
        others_done = bool(self.completed - {proc})
        if target is not None:
            if target.complete_seq is None and others_done:
                return "its communicator never completed init while other ranks did"
            return None
        if others_done and proc not in self.completed:
            return "its process never completed an init while others did"
        return None

    def cascade(self, t: Trace) -> str | None:
        # a failure unwinds through the caller's thread too (``group.cc -> 1`` after an async ``-> 3``), and a
        # trace right before an error line of the same file is that error's cause
        f = self.last_failed.get(t.thread[:2])
        if f is not None and 0 <= t.first_seq - f.last_seq <= WARN_WINDOW:
            return "follows a failed trace of the same process"
        seqs = self.error_seqs.get(t.message.file)
        if seqs:
            i = bisect.bisect_left(seqs, (t.last_seq, ""))
            if i < len(seqs) and seqs[i][0] - t.last_seq <= WARN_WINDOW:
                return f"followed by {seqs[i][1]}"
        return None


def group_warnings(
    warnings: Sequence[Message], rank_of_proc: Mapping[tuple[str | None, int | None], int] | None = None
) -> tuple[WarningGroup, ...]:
    """Identical warning texts with how many lines, ranks and processes carry them; most printed first.

    ``rank_of_proc`` gives the rank a process holds, for WARNs printed before its communicator said it (startup).
    """
    ranks_by = rank_of_proc or {}
    acc: dict[str, tuple[Message, list[Message]]] = {}
    for w in warnings:
        got = acc.get(w.text)
        if got is None:
            acc[w.text] = (w, [w])
        else:
            got[1].append(w)
    groups = []
    for text, (first, items) in acc.items():
        source = dict(first.extra).get("source")
        groups.append(
            WarningGroup(
                text=text,
                kind=first.kind,
                count=len(items),
                ranks=tuple(sorted({r for m in items if (r := ranks_by.get((m.host, m.pid), m.rank)) is not None})),
                processes=len({(m.host, m.pid) for m in items if m.pid is not None}),
                hosts=tuple(sorted({m.host for m in items if m.host})),
                file=first.file,
                line=first.line,
                source=str(source) if source is not None else None,
            )
        )
    return tuple(sorted(groups, key=lambda g: -g.count))


def with_fatal_warns(
    judged: list[tuple[int, Message, bool]],
    traces: Sequence[Trace],
    fatal: Sequence[tuple[int, ThreadKey, Message]],
) -> tuple[list[tuple[int, Message, bool]], list[tuple[int, Message]]]:
    """Fatal WARNs as errors, except those a failed trace of the same thread already reports: that trace gains the
    WARN's text (``warn``) and the WARN raises no second error. ``judged`` is :func:`judge_traces` of ``traces``.
    An entry whose thread id is None (``Abort COMPLETE``) is reported by any failed trace of its process."""
    out = list(judged)
    alone: list[tuple[int, Message]] = []
    for seq, thread, m in fatal:
        whole = thread[2] is None
        for i, ((tseq, tm, is_error), t) in enumerate(zip(out, traces, strict=True)):
            if not is_error:
                continue
            if (whole and t.thread[:2] == thread[:2]) or (
                t.thread == thread and t.first_seq - WARN_WINDOW <= seq <= t.last_seq + WARN_WINDOW
            ):
                if "warn" not in dict(tm.extra):
                    out[i] = (tseq, replace(tm, extra=(*tm.extra, ("warn", m.text))), is_error)
                break
        else:
            alone.append((seq, m))
    return out, alone
