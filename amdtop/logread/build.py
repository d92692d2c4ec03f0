"""Incidents from classes: order the sightings by time, let the first cause open an incident and its consequences
join it; the scope comes from the lines that name it, and a verdict says only what the lines say.

- A ``cause`` opens an incident, unless an open one of the same kind is within :data:`WINDOW_S` (the same fault on
  several GPUs or ranks at once is one incident), or an open one is further upstream (:data:`DEPTH`: a dead worker
  is upstream of the remote error its peers print): then it joins that one as a consequence.
- A ``consequence`` joins the newest open incident within the window; alone, it opens one of its own kind, which then
  says that no first cause was printed.
- ``noise`` never builds anything.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field, replace

from amdtop.logread.incidents.model import MAX_EVIDENCE, Incident
from amdtop.logread.reader import Sighting

WINDOW_S = 600.0
"""A cause or consequence further than this from an open incident starts afresh (a job restarted)."""

DEPTH = {
    # how far upstream a kind sits: a cause of a deeper kind after an open incident of a shallower one is its
    # consequence (the order of a failure's spread: the GPU/NIC/start-up fault, the process, its peers, the job)
    "gpu_memory_fault": 0,
    "gpu_oom": 0,
    "startup_failed": 0,
    "comm_init_failed": 0,
    "nic_flap": 0,
    "kernel_fault": 0,
    "hardware_error": 0,
    "gpu_lost": 0,
    "gpu_reset": 0,
    "hive_reset": 0,
    "worker_crashed": 1,
    "worker_died": 1,
    "net_completion_error": 2,
    "peer_lost": 2,
    "collective_timeout": 3,
    "engine_dead": 4,
}
_DEFAULT_DEPTH = 0


def depth(kind: str) -> int:
    """How far downstream ``kind`` sits (0: a first cause)."""
    return DEPTH.get(kind, _DEFAULT_DEPTH)


@dataclass(slots=True)
class Draft:
    """An incident being built."""

    kind: str
    root: Sighting
    causes: list[Sighting] = field(default_factory=list)
    consequences: list[Sighting] = field(default_factory=list)
    last: float | None = None
    orphan: bool = False
    """Opened by a consequence: no first cause was printed."""

    def near(self, s: Sighting) -> bool:
        """Whether ``s`` is close enough in time to belong here (lines without a time: one run of the job)."""
        if self.last is None or not s.timed:
            return True
        return abs(s.order[0] - self.last) <= WINDOW_S


def _touch(d: Draft, s: Sighting) -> None:
    if s.timed:
        t = s.last_time if s.last_time is not None else s.order[0]
        d.last = t if d.last is None else max(d.last, t)


def drafts(sightings: Sequence[Sighting], owned_elsewhere: Collection[str] = ()) -> list[Draft]:
    """Group sightings (in event order) into drafts. Causes of a kind in ``owned_elsewhere`` (built by another
    reader with its own analysis, e.g. the watchdog's SeqNums) open nothing here but still join as consequences."""
    out: list[Draft] = []
    for s in sightings:
        e = s.entry
        if e.cls == "noise":
            continue
        open_ = [d for d in out if d.near(s)]
        if e.cls == "cause":
            same = next((d for d in reversed(open_) if d.kind == e.kind and not d.orphan), None)
            if same is not None:
                same.causes.append(s)
                _touch(same, s)
                continue
            # an incident a consequence opened names no cause, so it is upstream of nothing: the cause takes it over
            upstream = next((d for d in reversed(open_) if depth(d.kind) < depth(e.kind) and not d.orphan), None)
            if upstream is not None:
                upstream.consequences.append(s)
                _touch(upstream, s)
                continue
            orphan = next((d for d in reversed(open_) if d.orphan), None)
            if orphan is not None and e.kind not in owned_elsewhere:
                # a consequence came first (printed before its cause, or by a faster process, or a wrapper such as
                # PyTorch's "NCCL error ..., internal error" before its "Last error:"): the cause takes over
                orphan.consequences.insert(0, orphan.root)
                orphan.consequences += orphan.causes
                orphan.root, orphan.kind, orphan.orphan, orphan.causes = s, e.kind, False, [s]
                _touch(orphan, s)
                continue
            if e.kind in owned_elsewhere:
                continue
            d = Draft(e.kind, s, [s])
            _touch(d, s)
            out.append(d)
            continue
        # a consequence
        target = open_[-1] if open_ else None
        if target is not None:
            target.consequences.append(s)
            _touch(target, s)
            continue
        if e.kind in owned_elsewhere:
            continue
        d = Draft(e.kind, s, [s], orphan=True)
        _touch(d, s)
        out.append(d)
    return out


def _ints(values: Sequence[str | int | None]) -> tuple[int, ...]:
    out = set()
    for v in values:
        if isinstance(v, int):
            out.add(v)
        elif isinstance(v, str) and v.isdigit() and len(v) < 7:
            out.add(int(v))
    return tuple(sorted(out))


def _range_text(values: Sequence[int]) -> str:
    return ",".join(str(v) for v in values)


_QUOTED_RANK = re.compile(r"\[(?:PG [^\]]*?)?Rank (\d+)\]")


_QUOTING_FAMILIES = ("pytorch", "nccl")


def _quoted_rank(s: Sighting) -> int | None:
    """The ProcessGroupNCCL prefix (``[PG ID 0 ... Rank 1]``) quoted before the match inside the message (a C++
    ``what():`` line), the last one before it. Only PyTorch prints that prefix, in front of its own text and of the
    NCCL errors it quotes: a ROCr or Ray line glued behind another program's ``[Rank 0]`` does not belong to rank 0."""
    if s.entry.family not in _QUOTING_FAMILIES:
        return None
    found = _QUOTED_RANK.findall(s.head.text, 0, s.match.start)
    return int(found[-1]) if found else None


RankOf = Callable[[str | None, int | None, int | None], int | None]
"""``(host, pid, local device) -> rank`` where the process's own communicator lines named it, else ``None``."""


def _scope(causes: Sequence[Sighting], rank_of: RankOf | None = None) -> dict[str, tuple[str, ...] | tuple[int, ...]]:
    """Every scope value the cause lines name (only what a line says; a rank from an NCCL head only where that
    process's communicator lines named it, never the device index)."""
    values: list[str | int | None] = [s.head.rank if s.head.rank is not None else _quoted_rank(s) for s in causes]
    values += [s.match.field("rank") for s in causes]
    values += [rank_of(s.head.host, s.head.pid, s.head.dev) for s in causes if rank_of and s.head.dev is not None]
    ranks = _ints(values)
    devices = _ints([s.head.dev for s in causes] + [s.match.field(k) for s in causes for k in ("dev", "device")])
    hosts = tuple(sorted({h for s in causes if (h := s.match.field("host") or s.head.host)}))
    nodes = tuple(sorted({v for s in causes if (v := s.match.field("node")) is not None}))
    peers = tuple(sorted({v for s in causes if (v := s.match.field("peer")) is not None}))
    ports = tuple(
        sorted(
            {
                f"{nic}:{port}" if port else nic
                for s in causes
                if (nic := s.match.field("nic"))
                for port in [s.match.field("port")]
            }
        )
    )
    addresses = tuple(sorted({v for s in causes if (v := s.match.field("address")) is not None}))
    errors = tuple(dict.fromkeys(v for s in causes if (v := s.match.field("error")) is not None))
    what = tuple(dict.fromkeys(v for s in causes if (v := s.match.field("what")) is not None))
    procs = tuple(dict.fromkeys(p for s in causes if (p := _process(s))))
    from_ranks = _ints([s.match.field("from_rank") for s in causes])
    labels = tuple(dict.fromkeys(v for s in causes if (v := s.head.label)))
    return {
        "labels": labels,
        "from_ranks": from_ranks,
        "ranks": ranks,
        "devices": devices,
        "hosts": hosts,
        "gpu_nodes": nodes,
        "peers": peers,
        "nic_ports": ports,
        "addresses": addresses,
        "errors": errors,
        "what": what,
        "processes": procs,
    }


def _process(s: Sighting) -> str | None:
    """The process a line names: the one its fields name (Ray's ``Worker PID: N`` of a dead worker), else the one
    that printed it (a Ray/vLLM prefix), never a monitor named as the dead one."""
    pid = s.match.field("pid")
    if pid is not None:
        return f"pid {pid}"
    if s.head.actor in ("raylet", "gcs_server", "monitor", "autoscaler"):
        return None  # Ray's daemons report other processes' deaths
    if s.head.actor:
        return s.head.actor + ("" if s.head.pid is None else f" pid={s.head.pid}")
    if s.head.pid is not None and s.head.dev is None:
        return f"pid {s.head.pid}"
    return None


_OPTIONAL = re.compile(r"\[([^\[\]]*)\]")
_FIELD = re.compile(r"\{(\w+)\}")


def say(template: str, fields: dict[str, str]) -> str:
    """``template`` with ``{field}`` filled from ``fields``; a ``[...]`` part naming a field the line did not give
    is left out (a verdict never fills in what no line says)."""

    def part(m: re.Match[str]) -> str:
        inner = m.group(1)
        return inner if all(f in fields for f in _FIELD.findall(inner)) else ""

    text = _OPTIONAL.sub(part, template)
    return _FIELD.sub(lambda m: fields.get(m.group(1), "?"), text)


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _where(sc: dict[str, tuple[str, ...] | tuple[int, ...]]) -> str:
    parts = []
    if sc["what"]:
        parts.append(", ".join(str(w) for w in sc["what"][:6]))
    if sc["gpu_nodes"]:
        # as ROCr and KFD spell them ("GPU node-2"): a person greps the log for the line's own words
        parts.append(f"GPU {', '.join(f'node-{n}' for n in sc['gpu_nodes'])}")
    if sc["addresses"]:
        parts.append(f"address{'es' if len(sc['addresses']) > 1 else ''} {', '.join(map(str, sc['addresses'][:4]))}")
    if sc["peers"]:
        parts.append(f"peer{'s' if len(sc['peers']) > 1 else ''} {', '.join(map(str, sc['peers'][:4]))}")
    if sc["nic_ports"]:
        parts.append(f"NIC port{'s' if len(sc['nic_ports']) > 1 else ''} {', '.join(map(str, sc['nic_ports']))}")
    if sc["labels"]:
        # the scope as the emitter printed it (SGLang's "TP2"): a person reads the line's own words
        parts.append(", ".join(map(str, sc["labels"][:4])))
    ranks = sc["ranks"]
    if ranks:
        # one reporting rank is one rank: the count is of the ranks whose lines say it, never "every rank"
        parts.append(f"rank{'s' if len(ranks) > 1 else ''} {_range_text([int(r) for r in ranks])}")
    if sc["devices"]:
        parts.append(
            f"local device{'s' if len(sc['devices']) > 1 else ''} {_range_text([int(d) for d in sc['devices']])}"
        )
    if sc["from_ranks"]:
        parts.append(f"timeout signalled by rank {', '.join(map(str, sc['from_ranks']))}")
    if sc["hosts"]:
        hosts = [str(h) for h in sc["hosts"]]
        more = f" (+{len(hosts) - 8} more)" if len(hosts) > 8 else ""
        parts.append(f"on {', '.join(hosts[:8])}{more}")
    if sc["processes"] and not ranks:
        parts.append(f"in {', '.join(map(str, sc['processes'][:3]))}")
    return "; ".join(parts)


def incident(d: Draft, rank_of: RankOf | None = None) -> Incident:
    """The verdict over one draft."""
    root = d.root.entry
    causes = d.causes or [d.root]
    consequences = d.consequences
    if d.orphan:
        # no cause was printed: the lines of the opening kind are the incident's own (each rank's heartbeat line)
        causes = [*causes, *(c for c in d.consequences if c.entry.kind == d.kind)]
        consequences = [c for c in d.consequences if c.entry.kind != d.kind]
    sc = _scope(causes, rank_of)
    n_lines = sum(s.count for s in causes)
    summary = root.title
    if root.say is not None:
        fields = {k.rstrip("0123456789"): v for k, v in reversed(d.root.match.fields)}
        summary += f": {say(root.say, fields)}"
        sc = {**sc, "what": ()}
    where = _where(sc)
    if where:
        summary += f"{'; ' if root.say is not None else ': '}{where}"
    if sc["errors"]:
        summary += f" ({'; '.join(str(e) for e in sc['errors'][:2])})"
    if n_lines > 1:
        summary += f" [{_plural(n_lines, 'line')}]"
    later = list(dict.fromkeys(s.entry.title for s in consequences))
    if later:
        summary += f"; then: {', '.join(later[:4])}"
    cause = root.meaning
    if d.orphan:
        cause = f"no first cause was printed before this; {cause}"
    evidence = [s.text for s in causes]
    evidence += [x for s in causes for x in s.lines]
    evidence += [s.text for s in consequences]
    cons_scope = _scope(consequences) if consequences else None
    detail: list[tuple[str, object]] = [
        ("entries", tuple(dict.fromkeys(s.entry.id for s in causes))),
        ("source", root.source),
        ("lines", n_lines),
    ]
    for key in ("gpu_nodes", "peers", "nic_ports", "addresses", "errors", "processes"):
        if sc[key]:
            detail.append((key, sc[key]))
    if consequences:
        detail.append(("consequences", tuple(dict.fromkeys(s.entry.id for s in consequences))))
        for key in ("peers", "hosts", "nic_ports", "from_ranks"):
            if cons_scope and cons_scope[key]:
                detail.append((f"consequence_{key}", cons_scope[key]))
    return Incident(
        kind=d.kind,
        summary=summary,
        cause=cause,
        fix=root.fix,
        evidence=tuple(dict.fromkeys(evidence))[:MAX_EVIDENCE],
        ranks=tuple(int(r) for r in sc["ranks"]),
        hosts=tuple(str(h) for h in sc["hosts"]),
        devices=tuple(int(v) for v in sc["devices"]),
        group=d.root.head.group,
        detail=tuple(detail),
    )


@dataclass(frozen=True, slots=True)
class Built:
    """An incident with where it began and what joined it."""

    incident: Incident
    where: tuple[str, int]
    """File and line of the line that opened it."""
    joined: frozenset[str]
    """Kinds of the lines that joined it as consequences."""


def build(
    sightings: Sequence[Sighting], owned_elsewhere: Collection[str] = (), rank_of: RankOf | None = None
) -> list[Built]:
    """Every incident the sightings tell, in the order they began; ``rank_of`` names the rank of an NCCL line's
    process where its communicator lines did."""
    return [
        Built(incident(d, rank_of), (d.root.file, d.root.line), frozenset(s.entry.kind for s in d.consequences))
        for d in drafts(sightings, owned_elsewhere)
    ]


def merge(built: Sequence[Built], external: Sequence[tuple[tuple[str, int], Incident]]) -> tuple[Incident, ...]:
    """The catalog's incidents together with those another reader built with its own analysis (the watchdog's
    SeqNums, NET/IB statuses, crashes), in the order they began.

    An external incident whose lines joined a catalog incident further upstream is a consequence: it is folded into
    that incident (named in its summary and ``detail.consequence_incidents``), not reported as a second verdict. A
    catalog incident of a kind the other reader built is its duplicate (the other reader's analysis is kept)."""
    kept: list[tuple[tuple[str, int], Incident]] = []
    folded: dict[int, list[Incident]] = {}
    for where, ext in external:
        host = next(
            (
                n
                for n, b in enumerate(built)
                if ext.kind in b.joined and depth(b.incident.kind) < depth(ext.kind) and b.where <= where
            ),
            None,
        )
        if host is None:
            host = next(
                (n for n, b in enumerate(built) if ext.kind in b.joined and depth(b.incident.kind) < depth(ext.kind)),
                None,
            )
        if host is not None:
            folded.setdefault(host, []).append(ext)
        else:
            kept.append((where, ext))
    ext_kinds = {e.kind for _w, e in external}
    for n, b in enumerate(built):
        inc = b.incident
        if inc.kind in ext_kinds:
            continue  # the same kind of lines, read with more analysis by the other reader
        more = folded.get(n)
        if more:
            inc = replace(
                inc,
                summary=inc.summary + "; consequences: " + "; ".join(m.summary for m in more[:3]),
                detail=(*inc.detail, ("consequence_incidents", tuple(m.summary for m in more))),
            )
        kept.append((b.where, inc))
    kept.sort(key=lambda pair: pair[0])
    return tuple(i for _w, i in kept)
