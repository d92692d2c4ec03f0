"""Frame -> the Processes pane: rows sorted within each GPU, a total row per GPU, the ``/`` filter; and what the
empty Processes and Logs panes say. Pure: no Textual."""

from __future__ import annotations

import re
import time
from collections.abc import Callable

from rich.text import Text

from amdtop.gpuprocs import GpuProcessTotal, ProcessRow
from amdtop.pipeline import NodeFrame

NO_PROCESSES = "no process holds GPU memory"
GIB = 1024**3
MIB = 1024**2
LEFTOVER_BYTES = GIB
"""A GPU without processes gets a total row when at least this much of its memory is in use (a leftover)."""
_GPU = re.compile(r"^(?:gpu)?(\d+)$", re.IGNORECASE)
OWNER_STYLE = {"worker": "green", "vllm": "cyan", "foreign": "yellow"}
_NUMERIC: dict[str, Callable[[ProcessRow], float]] = {
    "mem": lambda r: r.vram_bytes or 0,
    "gpu_util": lambda r: -1.0 if r.gpu_util_pct is None else r.gpu_util_pct,
    "cpu": lambda r: -1.0 if r.cpu_pct is None else r.cpu_pct,
    "rss": lambda r: r.rss_bytes or 0,
    "elapsed": lambda r: -1.0 if r.elapsed_s is None else r.elapsed_s,
}
_TEXT: dict[str, Callable[[ProcessRow], object]] = {
    "pid": lambda r: r.pid,
    "user": lambda r: r.user or "~",
    "owner": lambda r: r.owner_label,
    "command": lambda r: r.command or r.name or "~",
}


def size(value: int | None) -> str:
    if value is None:
        return "-"
    return f"{value / GIB:.1f}G" if value >= GIB else f"{value / MIB:.0f}M"


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    s = int(seconds)
    if s >= 86400:
        return f"{s // 86400}d{s % 86400 // 3600:02d}h"
    if s >= 3600:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 60}:{s % 60:02d}"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}%"


def read_at(frame: NodeFrame | None) -> str:
    """`` · read 10:32:25Z`` where the backend reads the process lists on a slower cadence than the tick (the rows are
    that reading's, not the tick's); empty where they are read every tick."""
    if frame is None or frame.snapshot.processes_at is None:
        return ""
    return " · read " + time.strftime("%H:%M:%SZ", time.gmtime(frame.snapshot.processes_at))


def one_line(command: str | None, name: str | None) -> str:
    """The command on one line (argv words may hold newlines), cut to what a terminal row can show."""
    text = " ".join((command or name or "?").split())
    return text if len(text) <= 240 else text[:239] + "…"


def row_cells(r: ProcessRow) -> tuple[object, ...]:
    gpu = str(r.gpu) if r.partition is None else f"{r.gpu}.p{r.partition}"
    owner = Text(r.owner_label, style=OWNER_STYLE.get(r.owner_kind, ""))
    util = Text(_pct(r.gpu_util_pct), style="bold" if (r.gpu_util_pct or 0) >= 50 else "")
    return (
        gpu, str(r.pid) if r.pid > 0 else "?", r.user or "-", owner, size(r.vram_bytes), util,
        "-" if r.cpu_pct is None else f"{r.cpu_pct:.1f}", size(r.rss_bytes), duration(r.elapsed_s),
        one_line(r.command, r.name),
    )  # fmt: skip


def total_cells(t: GpuProcessTotal) -> tuple[object, ...]:
    style = "dim"
    unheld = t.unheld_bytes
    note = f"held of {size(t.used_bytes)} used"
    if unheld is not None:
        note += f"; {size(unheld)} held by no live process"
    return (
        Text(f"{t.gpu} Σ", style="bold"), "", "", Text(f"{t.processes} proc", style=style),
        Text(size(t.held_bytes), style="bold"), "", "", "", "", Text(note, style=style),
    )  # fmt: skip


def matches(r: ProcessRow, term: str) -> bool:
    """Every word of ``term`` names the row's GPU (``gpu3``, ``3``), or is in its pid, user, owner or command."""
    text = f"{r.pid} {r.user or ''} {r.owner_label} {r.owner_kind} {r.name or ''} {r.command or ''}".lower()
    for word in term.lower().split():
        gpu = _GPU.match(word)
        if gpu is not None and int(gpu.group(1)) == r.gpu:
            continue
        if word not in text:
            return False
    return True


def sort_rows(rows: list[ProcessRow], sort: str, reverse: bool) -> list[ProcessRow]:
    numeric = _NUMERIC.get(sort)
    if numeric is not None:
        # Biggest first by default; ties by pid so the order does not flicker.
        return sorted(rows, key=lambda r: (-numeric(r) if not reverse else numeric(r), r.pid))
    text = _TEXT.get(sort, _TEXT["pid"])
    return sorted(rows, key=lambda r: (text(r), r.pid), reverse=reverse)


KIND_ORDER = {"worker": 0, "vllm": 1, "foreign": 2}


def worker_tree(
    frame: NodeFrame, sort: str = "mem", reverse: bool = False, term: str = ""
) -> dict[str, tuple[object, ...]]:
    """The processes under their owner (amdtop's workers, then discovered vLLM servers, then the rest): a row per
    owner (``o-<owner>``: its processes, GPUs, GPU memory and RSS summed) over its processes sorted by ``sort``."""
    by_owner: dict[str, list[ProcessRow]] = {}
    for r in frame.processes:
        if not term.strip() or matches(r, term):
            by_owner.setdefault(r.owner, []).append(r)
    out: dict[str, tuple[object, ...]] = {}
    for owner, rows in sorted(by_owner.items(), key=lambda kv: (KIND_ORDER.get(kv[1][0].owner_kind, 3), kv[0])):
        kind = rows[0].owner_kind
        gpus = sorted({r.gpu for r in rows})
        held = sum(r.vram_bytes or 0 for r in rows)
        rss = sum(r.rss_bytes or 0 for r in rows) if any(r.rss_bytes for r in rows) else None
        out[f"o-{owner}"] = (
            Text("▾", style="bold"), "", "", Text(owner, style=f"bold {OWNER_STYLE.get(kind, '')}"),
            Text(size(held), style="bold"), "", "", size(rss), "",
            Text(f"{len(rows)} proc on GPU{'s' if len(gpus) > 1 else ''} {','.join(map(str, gpus))}", style="dim"),
        )  # fmt: skip
        for r in sort_rows(rows, sort, reverse):
            key = r.key
            while key in out:
                key += "+"
            cells = row_cells(r)
            out[key] = (f"└ {cells[0]}", *cells[1:])
    return out


def process_rows(
    frame: NodeFrame, sort: str = "mem", reverse: bool = False, term: str = "", tree: bool = False
) -> dict[str, tuple[object, ...]]:
    """Per GPU in index order: its processes sorted by ``sort``, then its total row (``t-<gpu>``); with ``tree``,
    under their owners instead (:func:`worker_tree`)."""
    if tree:
        return worker_tree(frame, sort, reverse, term)
    by_gpu: dict[int, list[ProcessRow]] = {}
    for r in frame.processes:
        if not term.strip() or matches(r, term):
            by_gpu.setdefault(r.gpu, []).append(r)
    out: dict[str, tuple[object, ...]] = {}
    for total in frame.process_totals:
        rows = by_gpu.get(total.gpu, [])
        if not rows and (term.strip() or (total.unheld_bytes or 0) < LEFTOVER_BYTES):
            continue  # nothing on it (the GPU pane says so); memory held by no process is worth a line
        for r in sort_rows(rows, sort, reverse):
            key = r.key
            while key in out:  # pid 0 (a process in another PID namespace) can repeat on one GPU
                key += "+"
            out[key] = row_cells(r)
        out[f"t-{total.gpu}"] = total_cells(total)
    return out


def find_row(frame: NodeFrame | None, key: str) -> ProcessRow | None:
    if frame is None:
        return None
    return next((r for r in frame.processes if r.key == key), None)


def no_logs_text(workers: int) -> str:
    """What the empty Logs pane says."""
    if not workers:
        return "no logs: the RCCL/NCCL lines of amdtop's workers show here once one runs (5 Workers says how)"
    return "no communicator seen yet: set NCCL_DEBUG=INFO in a profile's [worker.env] to follow RCCL/NCCL init here"
