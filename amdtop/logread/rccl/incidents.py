"""Incidents from RCCL/NCCL and PyTorch logs: one verdict per incident, across the ranks that each printed a line.

- A collective timeout (PyTorch's ``Watchdog caught collective operation timeout: WorkNCCL(SeqNum=N, ...)`` on each
  rank) is grouped by process group and time window and judged by the SeqNums the ranks printed, within that group
  only: the rank whose printed last completed SeqNum is behind the others' is the laggard (or the one PyTorch's desync
  report names); a rank that printed none is "not reported", never placed; ranks that reported the same SeqNum name
  no laggard (the one that did not join is not in the log); one reporting rank is one rank.
- NET/IB completion errors are judged by their status code (``ibv_wc_status``); ``[N]`` in the line head is the
  local device, the rank is named only where the process's communicator lines name it; the same error on several
  hosts at once is a configuration problem, not one cable.
- A process that died of a signal is named with the signal and the lines it printed before.
"""

from __future__ import annotations

import re
import signal
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

from amdtop.logread.incidents.model import MAX_EVIDENCE, Incident
from amdtop.logread.rccl.failures import ranges
from amdtop.logread.rccl.grammar import APP_PREFIX, TP_RANK
from amdtop.logread.rccl.report import Comm, Message
from amdtop.logread.rccl.verdicts import is_advisory

WINDOW_S = 900.0
"""Watchdog lines of one process group further apart than this are separate incidents (a job restarted)."""

IB_STATUS: dict[int, tuple[str, str, str]] = {
    # ibv_wc_status (rdma-core's verbs.h); cause, fix
    4: (
        "IBV_WC_LOC_PROT_ERR",
        "local protection error: the NIC could not access the buffer it was given (memory registration, GPUDirect "
        "RDMA / peer memory, or the GID/RoCE configuration)",
        "check GPUDirect RDMA (nvidia-peermem / amdgpu peer memory loaded, IOMMU off or passthrough, PCIe ACS off) and "
        "NCCL_IB_GID_INDEX; retry with NCCL_NET_GDR_LEVEL=LOC to confirm",
    ),
    5: (
        "IBV_WC_WR_FLUSH_ERR",
        "work requests flushed after an earlier error on the same queue pair: a consequence, not the cause",
        "find the first error on that queue pair (another status) and fix that",
    ),
    10: (
        "IBV_WC_REM_ACCESS_ERR",
        "remote access error: the peer refused the RDMA access (its registration or keys)",
        "check the peer's GPUDirect RDMA and memory registration",
    ),
    12: (
        "IBV_WC_RETRY_EXC_ERR",
        "transport retry counter exceeded: the peer or the link to it is unreachable (link down, routing, a dead peer "
        "process, or a badly congested fabric)",
        "check the ports (ibstat / ibv_devinfo: State Active), routing between the two hosts (RoCE: GID index, "
        "NCCL_IB_GID_INDEX, PFC/ECN), and whether the peer process is still alive; raise NCCL_IB_TIMEOUT only "
        "when the link is merely congested",
    ),
    13: (
        "IBV_WC_RNR_RETRY_EXC_ERR",
        "receiver-not-ready retries exceeded: the peer stopped posting receives (stuck or dead)",
        "look at the peer process (is it alive, is it stuck)",
    ),
}


def _get(m: Message, key: str) -> object:
    return dict(m.extra).get(key)


def _int(m: Message, key: str) -> int | None:
    v = _get(m, key)
    return v if isinstance(v, int) else None


def _ranges(ranks: Sequence[int]) -> str:
    return ranges(list(ranks))


def build_incidents(
    facts: Sequence[Message],
    errors: Sequence[Message],
    warnings: Sequence[Message],
    comms: Sequence[Comm],
    after: Mapping[str, Sequence[str]] | None = None,
    recent: Mapping[str, Iterable[str]] | None = None,
) -> tuple[Incident, ...]:
    """Every incident the lines tell, in the order their first lines came; ``after``: what each crashed process
    printed after its signal line, ``recent``: the last lines of each process, by its prefix."""
    return tuple(i for _where, i in build_incidents_at(facts, errors, warnings, comms, after, recent))


def build_incidents_at(
    facts: Sequence[Message],
    errors: Sequence[Message],
    warnings: Sequence[Message],
    comms: Sequence[Comm],
    after: Mapping[str, Sequence[str]] | None = None,
    recent: Mapping[str, Iterable[str]] | None = None,
) -> list[tuple[tuple[str, int], Incident]]:
    """:func:`build_incidents` with where each incident's first line is (file, line)."""
    out: list[tuple[tuple[str, int], Incident]] = []
    out += timeout_incidents(facts, errors, warnings, comms)
    out += ib_incidents(facts)
    out += crash_incidents(facts, after or {}, recent or {})
    out.sort(key=lambda pair: pair[0])
    return out


# -- collective timeouts -------------------------------------------------------------------------------------------
def _groups(watchdogs: list[Message], progress: Sequence[Message]) -> list[tuple[str | None, list[Message]]]:
    """Watchdog lines by process group (named on the line, or on the rank's progress line for that SeqNum), split
    where more than :data:`WINDOW_S` passed between two of them."""
    pg_of: dict[tuple[int | None, int | None], str] = {}
    for f in progress:
        group = _get(f, "group")
        if isinstance(group, str):
            pg_of[(f.rank, _int(f, "at"))] = group
    by: dict[str | None, list[Message]] = {}
    for w in watchdogs:
        group = _get(w, "group")
        key = group if isinstance(group, str) else pg_of.get((w.rank, _int(w, "seq")))
        by.setdefault(key, []).append(w)
    named = [k for k in by if k is not None]
    if None in by and len(named) == 1:
        # older lines name no group (``[Rank 4] Watchdog caught``): with one group in the log, they are its lines
        by[named[0]] = sorted([*by[named[0]], *by.pop(None)], key=lambda m: (m.file, m.line))
    out: list[tuple[str | None, list[Message]]] = []
    for key, lines in by.items():
        current: list[Message] = []
        last: float | None = None
        for w in lines:
            at = _get(w, "at_s")
            if isinstance(at, float) and last is not None and abs(at - last) > WINDOW_S and current:
                out.append((key, current))
                current = []
            if isinstance(at, float):
                last = at
            current.append(w)
        if current:
            out.append((key, current))
    return out


def timeout_incidents(
    facts: Sequence[Message], errors: Sequence[Message], warnings: Sequence[Message], comms: Sequence[Comm]
) -> list[tuple[tuple[str, int], Incident]]:
    """One ``collective_timeout`` per process group and time window."""
    watchdogs = [m for m in errors if m.kind == "watchdog_timeout"]
    if not watchdogs:
        return []
    progress = [f for f in facts if f.kind == "torch_progress"]
    desync = [f for f in facts if f.kind == "desync_laggards"]
    out = []
    for group, lines in _groups(watchdogs, progress):
        near = [d for d in desync if d.file == lines[0].file]
        out.append(((lines[0].file, lines[0].line), _timeout(group, lines, progress, errors, warnings, comms, near)))
    return out


MAX_NAMED_SILENT = 64
"""Ranks that printed nothing are listed by number only in a job this small; beyond it they are counted (a huge
``nranks`` in one line must never make a list of that size)."""


def _timeout(
    group: str | None,
    lines: list[Message],
    progress: Sequence[Message],
    errors: Sequence[Message],
    warnings: Sequence[Message],
    comms: Sequence[Comm],
    desync: Sequence[Message] = (),
) -> Incident:
    """The verdict over one process group's watchdog lines. It says only what the lines say: a rank that printed no
    "last completed" line is "not reported" (never placed at a SeqNum), SeqNums are compared only within this group,
    and the ranks that reported are named and counted (one reporting rank is one rank)."""
    seqs: dict[int, int] = {}  # rank -> the lowest SeqNum it timed out on
    line_of: dict[int, Message] = {}
    seen: dict[int, set[int]] = {}  # rank -> every SeqNum it timed out on
    for w in lines:
        seq = _int(w, "seq")
        if w.rank is None or seq is None:
            continue
        seen.setdefault(w.rank, set()).add(seq)
        if w.rank not in seqs or seq < seqs[w.rank]:
            seqs[w.rank], line_of[w.rank] = seq, w
    # Lines that name no process group, where one rank timed out on several SeqNums: each process group keeps its
    # own count, so these lines may come from several groups, and which of them a lone SeqNum of another rank
    # belongs to no line says. Nothing is compared then (SeqNums are compared only within one group).
    mixed = sorted(r for r, got in seen.items() if len(got) > 1) if group is None else []
    done: dict[int, int] = {}  # rank -> last completed SeqNum, only where the rank printed it
    prog_of: dict[int, Message] = {}
    at_seqs = set(seqs.values())
    for f in progress:
        at, completed = _int(f, "at"), _int(f, "completed")
        if f.rank is None or at is None or completed is None:
            continue
        own = _get(f, "group")
        if group is not None and own is not None and own != group:
            continue  # another process group's SeqNums are another count
        if f.rank not in seqs and at in at_seqs:
            # the rank's own watchdog line is missing (cut from the log) but its progress line says where it stopped
            seqs[f.rank] = at
        if at == seqs.get(f.rank):
            done[f.rank], prog_of[f.rank] = completed, f
    first = lines[0]
    op = _get(first, "op")
    op_text = op if isinstance(op, str) else "collective"
    tmo = _int(first, "timeout_ms")
    ranks = tuple(sorted(seqs))
    top = max(seqs.values(), default=_int(first, "seq"))
    where = f" in {group}" if group else ""
    head = f"{len(ranks)} rank{'s' if len(ranks) != 1 else ''} ({_ranges(ranks)}) timed out{where} on {op_text} SeqNum {top}"
    if tmo:
        head += f" after {tmo / 1000:g} s"
    evidence = [first.text]
    laggard: int | None = None
    unreported = tuple(r for r in ranks if r not in done)
    nranks = max((c.nranks for c in comms), default=0)
    silent_n = max(0, nranks - len(seqs)) if nranks else 0
    silent: tuple[int, ...] = ()
    if silent_n and nranks <= MAX_NAMED_SILENT:
        silent = tuple(r for r in range(nranks) if r not in seqs)
    lagging = sorted({r for d in desync if isinstance(got := _get(d, "ranks"), tuple) for r in got})
    low = min(done.values(), default=None)
    high = max(done.values(), default=None)
    if mixed and not lagging:
        several = ", ".join(str(q) for q in sorted(seen[mixed[0]])[:6])
        summary = (
            f"{head}: rank {mixed[0]} timed out on several SeqNums ({several}) and the lines name no process group, "
            "and they may count in several groups: SeqNums are not compared across ranks and no laggard can be named"
        )
        cause = (
            "collectives timed out, possibly in several process groups; which group each line belongs to is not "
            "printed, so the rank that did not join cannot be told from these lines"
        )
        fix = (
            "collect every rank's log with a PyTorch that prints the process group ([PG N Rank R]), or set "
            "TORCH_NCCL_TRACE_BUFFER_SIZE to dump the flight recorder; look at what ran before the first timeout"
        )
    elif lagging:
        laggard = lagging[0] if len(lagging) == 1 else None
        who = f"rank {laggard}" if laggard is not None else f"ranks {_ranges(lagging)}"
        how = str(_get(desync[0], "how"))
        summary = f"{head}: PyTorch's desync report names {who} as lagging ({how})"
        cause = f"{who} fell behind (or died) and the others wait for it in the collective"
        fix = (
            f"look at {who}: its process (py-spy dump --pid), its GPU (kernel log, amdtop snapshot), its input; the "
            "other ranks only wait for it"
        )
        evidence += [d.text for d in desync[:2]]
    elif low is not None and high is not None and low < high and len(done) > 1:
        behind = sorted(r for r, d in done.items() if d == low)
        if len(behind) == 1:
            laggard = behind[0]
        who = f"rank {laggard}" if laggard is not None else f"ranks {_ranges(behind)}"
        summary = (
            f"{head}: {who} {'is' if laggard is not None else 'are'} the laggard (last completed SeqNum {low}, "
            f"others that reported reached {high})"
        )
        cause = f"{who} fell behind the others and never joined the collective they wait in"
        fix = (
            f"look at {who}: its process (py-spy dump --pid), its GPU (kernel log, amdtop snapshot), its input; "
            "the other ranks only wait for it"
        )
        for r in behind[:2]:
            evidence.append(line_of[r].text if r in line_of else prog_of[r].text)
            if r in prog_of:
                evidence.append(prog_of[r].text)
    elif len(set(seqs.values())) > 1:
        # the oldest collective a rank timed out on is the first it never completed: a lower one is further behind
        # (compared within this group only; no rank is placed at a SeqNum it did not print)
        first_stuck = min(seqs.values())
        behind = sorted(r for r, q in seqs.items() if q == first_stuck)
        if len(behind) == 1:
            laggard = behind[0]
        who = f"rank {laggard}" if laggard is not None else f"ranks {_ranges(behind)}"
        summary = (
            f"{head}: {who} {'is' if laggard is not None else 'are'} the laggard (timed out on SeqNum {first_stuck}, "
            f"others that reported on {max(seqs.values())})"
        )
        cause = f"{who} fell behind the others and never completed collective {first_stuck}"
        fix = (
            f"look at {who}: its process (py-spy dump --pid), its GPU (kernel log, amdtop snapshot), its input; "
            "the other ranks only wait for it"
        )
        evidence += [line_of[r].text for r in behind[:2] if r in line_of]
    elif high is not None and high <= 0:
        who = "the rank that reported" if len(done) == 1 else f"the {len(done)} ranks that reported"
        summary = (
            f"{head}: {who} never completed a collective (last completed {high}): the first collective never completed"
        )
        cause = (
            "the path between the ranks never worked (P2P/IPC, shared memory or the network between these GPUs), or a "
            "rank never reached the first collective"
        )
        fix = (
            "run rccl-tests/nccl-tests on the same GPUs; retry with NCCL_P2P_DISABLE=1 (or NCCL_SHM_DISABLE=1) to "
            "confirm the path; check iommu=pt, PCIe ACS and the topology (amdtop topo)"
        )
    else:
        before = _before(first, errors, warnings)
        if done:
            stood = (
                f"rank {next(iter(done))} last completed SeqNum {high}"
                if len(done) == 1
                else f"ranks {_ranges(sorted(done))} all last completed SeqNum {high}"
            )
            summary = f"{head}: {stood}; no rank in this log is behind another, so no laggard can be named"
        else:
            summary = f"{head}: no rank printed its last completed SeqNum, so no laggard can be named"
        cause = (
            "the ranks that reported all entered this collective and waited: the rank that never joined it is not in "
            "this log (or the collective itself hung): what ran before it is the lead"
        )
        if len(ranks) == 1:
            cause = (
                f"only rank {ranks[0]} reported: the rank it waited for is not in this log; what ran before it is the "
                "lead"
            )
        if before:
            cause += f"; printed before: {before[0].text[:160]}"
            evidence += [m.text for m in before]
        fix = (
            "collect every rank's log (the one that did not join is the lead), look at what ran before this SeqNum "
            "(errors above, a rank that skipped or reordered a collective, a kernel fault at that time: amdtop "
            "snapshot); set TORCH_NCCL_TRACE_BUFFER_SIZE to dump the flight recorder next time"
        )
    if unreported:
        summary += (
            f"; rank{'s' if len(unreported) > 1 else ''} {_ranges(unreported)} printed no last completed SeqNum "
            "(not reported)"
        )
    if silent_n:
        named = f" ({_ranges(silent)})" if silent else ""
        summary += (
            f"; {silent_n} rank{'s' if silent_n > 1 else ''}{named} of {nranks} printed no timeout (not reported)"
        )
    detail: tuple[tuple[str, object], ...] = (
        ("timeout_ms", tmo),
        ("last_completed", tuple((r, done[r]) for r in ranks if r in done)),
        ("timed_out_seq", tuple((r, seqs[r]) for r in ranks)),
        ("not_reported", unreported),
        ("lines", len(lines)),
    )
    if silent_n:
        detail += (("silent_ranks", silent), ("silent_count", silent_n))
    if lagging:
        detail += (("desync_lagging", tuple(lagging)),)
    return Incident(
        kind="collective_timeout",
        summary=summary,
        cause=cause,
        fix=fix,
        evidence=tuple(dict.fromkeys(evidence))[:MAX_EVIDENCE],
        ranks=ranks,
        laggard=laggard,
        op=op if isinstance(op, str) else None,
        seq=top,
        group=group,
        detail=detail,
    )


def _before(first: Message, errors: Sequence[Message], warnings: Sequence[Message]) -> list[Message]:
    """Errors and non-advisory warnings printed before the first timeout line of the same file (newest last)."""
    out = [
        m
        for m in (*errors, *warnings)
        if m.file == first.file
        and m.line < first.line
        and m.kind not in ("watchdog_timeout", "unknown_env")
        and not is_advisory(m.text)
    ]
    out.sort(key=lambda m: m.line)
    return out[-2:]


# -- NET/IB completion errors --------------------------------------------------------------------------------------
def ib_incidents(facts: Sequence[Message]) -> list[tuple[tuple[str, int], Incident]]:
    """One ``net_completion_error`` over every NET/IB completion error: the first cause is the most printed status
    that is not a flush (status 5 follows the first error on a queue pair)."""
    lines = [f for f in facts if f.kind == "ib_completion"]
    if not lines:
        return []
    statuses = Counter(_int(f, "status") for f in lines)
    causes = [s for s, _n in statuses.most_common() if s != 5 and s is not None]
    status = causes[0] if causes else 5
    name, cause, fix = IB_STATUS.get(status, (f"status {status}", "a completion error", "see the NIC's counters"))
    firsts = [f for f in lines if _int(f, "status") == status]
    hosts = tuple(sorted({f.host for f in firsts if f.host}))
    devices = tuple(sorted({f.dev for f in firsts if f.dev is not None}))
    ranks = tuple(sorted({f.rank for f in firsts if f.rank is not None}))
    peers = tuple(sorted({p for f in firsts if isinstance(p := _get(f, "peer"), str)}))
    vendor = Counter(_int(f, "vendor_err") for f in firsts).most_common(1)[0][0]
    where = f"{len(hosts)} host{'s' if len(hosts) != 1 else ''} ({', '.join(hosts)})" if hosts else "unknown hosts"
    summary = f"NET/IB completion errors on {where}: status {status} ({name})"
    if vendor is not None:
        summary += f", vendor err {vendor} (0x{vendor:x})"
    summary += f"; local device{'s' if len(devices) != 1 else ''} {_ranges(devices) or '?'}"
    summary += (
        f"; rank{'s' if len(ranks) != 1 else ''} {_ranges(ranks)}" if ranks else "; ranks not named by these lines"
    )
    if peers:
        summary += f"; peer{'s' if len(peers) != 1 else ''} {', '.join(peers[:4])}"
    if len(hosts) > 1 and status != 5:
        cause = (
            f"the same error on {len(hosts)} hosts at once: a configuration problem (GID index, RoCE routing, "
            f"PFC/ECN, an MTU or subnet mismatch), not one cable; {cause}"
        )
        fix = "compare the hosts' NIC configuration (ibv_devinfo, show_gids, NCCL_IB_GID_INDEX, NCCL_IB_HCA); " + fix
    elif len(hosts) == 1 and len(peers) == 1 and status == 12:
        cause = f"the link between {hosts[0]} and {peers[0]} is down or unreachable; {cause}"
    flushed = statuses.get(5, 0)
    if flushed and status != 5:
        summary += f" (+{flushed} flushed after it, status 5)"
    evidence = tuple(dict.fromkeys(f.text for f in firsts))[:MAX_EVIDENCE]
    detail: tuple[tuple[str, object], ...] = (
        ("status", status),
        ("status_name", name),
        ("vendor_err", vendor),
        ("statuses", tuple((s, n) for s, n in statuses.most_common() if s is not None)),
        ("peers", peers),
        ("lines", len(lines)),
    )
    incident = Incident(
        kind="net_completion_error",
        summary=summary,
        cause=cause,
        fix=fix,
        evidence=evidence,
        ranks=ranks,
        hosts=hosts,
        devices=devices,
        detail=detail,
    )
    return [((lines[0].file, lines[0].line), incident)]


# -- crashed workers -----------------------------------------------------------------------------------------------
_FRAME = re.compile(r"^(?:\([^()]*pid=\d+[^()]*\)\s*)?\s*(?:\[[^]]*\] \S+:\d+:)?\s*@\s+0x")
"""A bare stack frame of absl's failure handler (``@ 0x7f... (unknown)``): no evidence by itself."""
_PC = re.compile(r"PC: @\s+0x[0-9a-f]+\s+\S+\s+(?P<fn>\S+\(\))")
_PY_FRAME = re.compile(r'File "[^"]*?([^/"]+)", line (\d+) in (\S+)')


def _where(lines: Sequence[str]) -> str | None:
    """The function a crash died in: absl's ``PC: @ ... fn()``, else the top frame of Python's faulthandler stack."""
    for line in lines:
        m = _PC.search(line)
        if m:
            return m.group("fn")
    for line in lines:
        m = _PY_FRAME.search(line)
        if m:
            return f"{m.group(3)} ({m.group(1)}:{m.group(2)})"
    return None


def _rank_lines(recent: Mapping[str, Iterable[str]], rank: int) -> tuple[int | None, tuple[str, ...]]:
    """The pid and last lines of the process whose prefix names TP rank ``rank`` (``(Worker_TP1 pid=7) ``)."""
    for key, lines in recent.items():
        tp = TP_RANK.search(key)
        if tp and int(tp.group(1)) == rank:
            m = APP_PREFIX.match(key)
            return (int(m.group("pid")) if m else None), tuple(lines)
    return None, ()


def _signal_of(code: object) -> str | None:
    """``SIGSEGV`` for exit code -11: a process killed by a signal exits with minus its number."""
    if not isinstance(code, int) or code >= 0:
        return None
    try:
        return signal.Signals(-code).name
    except ValueError:
        return None


def crash_incidents(
    facts: Sequence[Message], after: Mapping[str, Sequence[str]], recent: Mapping[str, Iterable[str]]
) -> list[tuple[tuple[str, int], Incident]]:
    """One ``worker_crashed`` per process that died of a signal (its several signal lines are one death). A signal
    line without a process prefix (faulthandler writes past vLLM's prefixing) takes its rank from vLLM's next
    ``Worker proc VllmWorker-N died`` line, and the lines before it from that rank's own output; a died line whose
    exit code is a signal (-11) is a crash even where nothing else was printed."""
    by: dict[tuple[str | None, int | None, str], list[Message]] = {}
    died = [f for f in facts if f.kind == "worker_died"]
    for f in facts:
        if f.kind == "signal":
            by.setdefault((f.host, f.pid, f.file if f.pid is None else ""), []).append(f)
    used: set[int] = set()
    for d in died:
        sig = _signal_of(_get(d, "exit_code"))
        if sig is not None and not any(
            f.rank == d.rank or (f.rank is None and f.file == d.file) for fs in by.values() for f in fs
        ):
            extra = (("signal", sig), ("process", f"VllmWorker-{d.rank}"), ("before", ()), ("key", ""))
            by[(None, None, f"died-{d.line}")] = [Message(d.file, d.line, d.text, "signal", d.rank, extra)]
    out = []
    for (host, pid, _where_file), lines in by.items():
        first = lines[0]
        sig = str(_get(first, "signal"))
        process = _get(first, "process")
        rank = next((f.rank for f in lines if f.rank is not None), None)
        named_by = None
        if rank is None:
            # the next died line of vLLM's executor after the signal names the rank that vanished
            named_by = next(
                (d for d in died if d.file == first.file and d.line >= first.line and id(d) not in used), None
            )
            if named_by is not None:
                used.add(id(named_by))
                rank = named_by.rank
                process = process or f"VllmWorker-{rank}"
        before = _get(first, "before")
        before_lines = tuple(b for b in before if not _FRAME.match(b)) if isinstance(before, tuple) else ()
        if rank is not None and (not before_lines or _get(first, "key") == ""):
            rank_pid, own = _rank_lines(recent, rank)
            before_lines = tuple(b for b in own if not _FRAME.match(b)) or before_lines
            pid = pid if pid is not None else rank_pid
        prefix = _get(first, "key")
        later: list[str] = []
        for f in lines[1:]:  # printed between its signal lines
            got = _get(f, "before")
            later += [str(b) for b in got] if isinstance(got, tuple) else []
        later += list(after.get(prefix, ())) if isinstance(prefix, str) else []
        where = _where([f.text for f in lines] + later)
        who = str(process) if isinstance(process, str) and process else "a process"
        if pid is not None:
            who += f" pid {pid}"
        if host:
            who += f" on {host}"
        if rank is not None:
            who += f" (rank {rank})"
        summary = f"{who} died of {sig}"
        if where:
            summary += f" in {where}"
        if before_lines:
            summary += f"; last line before: {before_lines[-1].strip()[:120]}"
        cause = {
            "SIGSEGV": "an invalid memory access in native code (a kernel library, a custom op, a driver call)",
            "SIGBUS": "a bad memory mapping (a truncated file, shared memory gone, a device that went away)",
            "SIGABRT": "the process aborted itself (a failed assertion, an uncaught C++ exception)",
            "SIGILL": "an instruction the CPU does not have (a build for another CPU)",
            "SIGFPE": "an arithmetic fault in native code",
        }.get(sig, f"the process was killed by {sig}")
        fix = (
            "its peers hang in their next collective until their timeout: restart the worker; the lines before the "
            "signal name the last thing it ran (a kernel, a library) to report or avoid; check the kernel log for a "
            "GPU fault at the same time"
        )
        died_line = () if named_by is None else (named_by.text,)
        incident = Incident(
            kind="worker_crashed",
            summary=summary,
            cause=cause,
            fix=fix,
            evidence=tuple(
                dict.fromkeys(
                    (
                        *before_lines[-2:],
                        *(f.text for f in lines),
                        *died_line,
                        *(b for b in later if not _FRAME.match(b)),
                    )
                )
            )[:MAX_EVIDENCE],
            ranks=() if rank is None else (rank,),
            hosts=() if not host else (host,),
            signal=sig,
            detail=(("pid", pid), ("process", process), ("where", where)),
        )
        out.append(((first.file, first.line), incident))
    return out
