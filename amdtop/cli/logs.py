"""``amdtop logs parse FILE... [--json]``: what RCCL/NCCL debug logs say about communicators and transports."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from amdtop.cli.common import open_from_args, print_json
from amdtop.errors import InputError
from amdtop.flag_json import flag_json
from amdtop.logread.rccl.diagnose import comm_label, comm_summary, diagnose
from amdtop.logread.rccl.parser import parse_files
from amdtop.logread.rccl.report import LogReport, WarningGroup, report_json
from amdtop.model import Flag, Topology


def register(sub: Any, parent: argparse.ArgumentParser) -> None:
    """Add the ``logs`` command group."""
    p = sub.add_parser("logs", parents=[parent], help="RCCL/NCCL debug logs")
    logs_sub = p.add_subparsers(dest="logs_command", metavar="SUBCOMMAND", required=True)
    parse = logs_sub.add_parser("parse", parents=[parent], help="parse RCCL/NCCL debug logs (any files, any ranks)")
    parse.add_argument("files", nargs="+", type=Path, metavar="FILE", help="log files (NCCL_DEBUG=INFO output)")
    parse.add_argument("--json", action="store_true", help="one JSON document on stdout")
    parse.add_argument(
        "--topo",
        action="store_true",
        help="check transports against this node's topology (via --backend / --demo) to flag fallbacks",
    )
    parse.set_defaults(func=run_parse)


def _topology(args: argparse.Namespace) -> Topology | None:
    if not args.topo:
        return None
    backend = open_from_args(args)
    try:
        return backend.topology()
    finally:
        backend.close()


def run_parse(args: argparse.Namespace) -> int:
    """Parse the files and print the report."""
    for path in args.files:
        if not path.exists():
            raise InputError(f"{path}: no such file; pass RCCL/NCCL log files")
        if path.is_dir():
            raise InputError(f"{path}: is a directory; pass the log files inside it")
    report = parse_files(args.files)
    topology = _topology(args)
    flags = diagnose(report, topology)
    if args.json:
        doc = report_json(report, [flag_json(f) for f in flags])
        for entry, comm in zip(doc["comms"], report.comms, strict=True):
            entry["summary"] = comm_summary(comm, topology)
        print_json(doc)
    else:
        print(render_report(report, flags, topology), end="")
    return 0


def warning_group_line(w: WarningGroup) -> str:
    """``x9 (8 ranks, 8 processes on n1) Missing "iommu=pt" …``: one grouped warning."""
    who = []
    if w.ranks:
        who.append(f"{len(w.ranks)} rank{'s' if len(w.ranks) != 1 else ''}")
    if w.processes:
        who.append(f"{w.processes} process{'es' if w.processes != 1 else ''}")
    where = f" on {','.join(w.hosts)}" if w.hosts else ""
    head = f"x{w.count}" + (f" ({', '.join(who)}{where})" if who else "")
    return f"{head} {w.text[:160]}"


def render_report(report: LogReport, flags: list[Flag], topology: Topology | None = None, limit: int = 10) -> str:
    """Human summary: library, communicators with their transports, env, warnings, errors, flags."""
    lib = f"{report.library or 'unknown library'} {report.version or ''}".strip()
    out = [f"{lib} · {report.files} files · {report.lines} lines ({report.unknown_lines} unknown)"]
    for c in report.comms:
        out.append(f"{comm_label(c)}: {comm_summary(c, topology)}")
        by: dict[str, list[str]] = {}
        for e in c.edges:
            label = f"{e.transport} (inter-node)" if e.inter_node else e.transport
            by.setdefault(label, []).append(f"{e.src}->{e.dst}")
        if by:
            out.append("  pairs: " + "; ".join(f"{t} {' '.join(p)}" for t, p in by.items()))
        for r in c.ranks:
            out.append(
                f"  rank {r.rank:<3} dev {'?' if r.dev is None else r.dev:<3} bus {r.bus_id or '?':<8} {r.host or '?'} pid {r.pid or '?'}"
            )
        if c.init_incomplete:
            phases = ", ".join(f"{r.rank}:{r.phase}" for r in c.ranks if r.phase is not None and not r.init_complete)
            out.append(f"  init: {c.init_complete}/{c.nranks} complete, stopped at {c.last_phase} ({phases})")
    if report.transports:
        out.append("transports: " + ", ".join(f"{t} x{n}" for t, n in report.transports))
    for h in report.nics:
        out.append(f"nics {h.host}{f' ({h.network})' if h.network else ''}: {' '.join(h.devices) or 'none listed'}")
    if report.env:
        out.append(
            "env: " + " ".join(f"{e.name}={e.value}{'' if e.known else ' (UNKNOWN, ignored)'}" for e in report.env)
        )
    if report.warning_groups:
        groups = report.warning_groups
        out.append(f"warnings ({len(report.warnings)} lines, {len(groups)} distinct):")
        out += [f"  {warning_group_line(w)}" for w in groups[:limit]]
        if len(groups) > limit:
            out.append(f"  … {len(groups) - limit} more")
    for title, items, why in (
        ("errors", report.errors, ""),
        ("notes", report.notes, ", return-code traces after which nothing failed"),
    ):
        if items:
            out.append(f"{title} ({len(items)}{why}):")
            out += [f"  {m.file}:{m.line}: {m.text[:160]}" for m in items[:limit]]
            if len(items) > limit:
                out.append(f"  … {len(items) - limit} more")
    out += [f"! {f.kind.value}: {f.message}" for f in flags]
    for inc in report.incidents:
        out += [f"!! {inc.kind}: {inc.summary}", f"   cause: {inc.cause}", f"   fix: {inc.fix}"]
        out += [f"   | {line[:200]}" for line in inc.evidence]
    return "\n".join(out) + "\n"
