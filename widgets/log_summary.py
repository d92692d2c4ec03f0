"""The Logs pane's head: per worker its communicators, every pair's transport, grouped warnings and flag messages."""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text

from amdtop.logread.incidents.model import Incident
from amdtop.logread.rccl.views import CommView, PairView, WorkerLogs
from amdtop.model import Flag, FlagKind

_ERRORS = (FlagKind.NCCL_ERROR, FlagKind.NCCL_TIMEOUT)


def _dev(gpu: int, partition: int | None) -> str:
    return str(gpu) if partition is None else f"{gpu}.{partition}"


def _pair(p: PairView) -> str:
    if p.src_gpu is None or p.dst_gpu is None:
        return f"{p.src}→{p.dst}"
    return f"{p.src}→{p.dst} GPU {_dev(p.src_gpu, p.src_partition)}→{_dev(p.dst_gpu, p.dst_partition)}"


def _transports(comm: CommView) -> list[tuple[str, str]]:
    """``(style, text)`` per transport: its pairs, marked fallback / inter-node."""
    by: dict[str, list[PairView]] = {}
    for p in comm.pairs:
        by.setdefault(p.transport, []).append(p)
    out = []
    for transport, pairs in by.items():
        links = {p.link for p in pairs if p.link}
        note = ""
        style = "green" if transport.startswith("P2P") else "magenta"
        if any(p.fallback for p in pairs):
            between = "partitions" if any(p.src_gpu == p.dst_gpu for p in pairs) else "GPUs"
            note = f" FALLBACK: the {between} share a {'/'.join(sorted(links)) or 'direct'} link"
            style = "bold magenta"
        elif all(p.inter_node for p in pairs):
            note, style = " inter-node", "cyan"
        elif links and transport.startswith("P2P"):
            note = f" over {'/'.join(sorted(links))}"
        shown = ", ".join(_pair(p) for p in pairs[:8]) + (f" +{len(pairs) - 8}" if len(pairs) > 8 else "")
        out.append((style, f"    {transport}{note}: {shown}"))
    return out


def flag_line(flag: Flag) -> str:
    """``! kind [worker · GPUs 4,5]: message``."""
    where = [w for w in (flag.worker,) if w]
    if flag.gpus:
        where.append("GPUs " + ",".join(str(g) for g in flag.gpus))
    return f"! {flag.kind.value}{' [' + ' · '.join(where) + ']' if where else ''}: {flag.message}"


def render_logs(
    workers: Sequence[WorkerLogs],
    flags: Sequence[Flag],
    *,
    kernel: Sequence[Incident] = (),
    max_groups: int = 2,
) -> Text:
    """The head of the Logs pane from typed values (errors first, then each worker's communicators); ``kernel``: the
    kernel log's incidents, live ones as alarms and those from before amdtop started (or past the hold) as history
    with their age, so an operator who arrives after a fault still sees it."""
    text = Text()
    for inc in kernel:
        if inc.historic:
            # the summary starts with the fault's age ("2 h ago: GPU 6 ...")
            text.append(f"history: {inc.kind}: {inc.summary}\n", style="dim")
        else:
            text.append(f"!! {inc.kind}: {inc.summary}\n", style="bold red")
            text.append(f"   cause: {inc.cause}\n   fix: {inc.fix}\n", style="red")
    for w in workers:
        for inc in w.incidents:
            # one verdict per incident above the per-line flags: what happened, why, and what to do
            text.append(f"!! {inc.kind} [{w.worker}]: {inc.summary}\n", style="bold red")
            text.append(f"   cause: {inc.cause}\n   fix: {inc.fix}\n", style="red")
    ordered = sorted(flags, key=lambda f: f.kind not in _ERRORS)
    for flag in ordered:
        text.append(flag_line(flag) + "\n", style="bold red" if flag.kind in _ERRORS else "bold magenta")
    for w in workers:
        lib = f"{w.library or ''} {w.version or ''}".strip()
        for c in w.comms:
            # the summary already says "(init complete on k/n)" and "(destroyed)"; say the healthy state too
            state = " · init complete" if c.ranks and c.init_complete >= c.nranks and not c.ended else ""
            hosts = f" on {', '.join(c.hosts)}" if len(c.hosts) > 1 else ""
            text.append(f"{w.worker}", style="bold")
            text.append(f" · {lib} · {c.id}: {c.summary}{hosts}{state}\n")
            for style, line in _transports(c):
                text.append(line + "\n", style=style)
        for g in w.warning_groups[:max_groups]:
            who = f"{len(g.ranks)} ranks, {g.processes} processes" if g.processes else f"{len(g.ranks)} ranks"
            text.append(f"  {w.worker} warn x{g.count} ({who}): {g.text}\n", style="yellow")
        if len(w.warning_groups) > max_groups:
            text.append(f"  … {len(w.warning_groups) - max_groups} more distinct warnings\n", style="yellow")
        if w.notes:
            text.append(
                f"  {w.worker}: {w.notes} return-code trace(s) judged harmless (nothing failed after)\n", style="dim"
            )
    text.rstrip()
    return text if text.plain else Text("no communicator seen yet")
