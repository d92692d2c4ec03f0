"""Frame -> the Workers pane's rows: one per worker, its engines (DP replicas) under it when expanded, and the
last failed control action on its row. Pure: no Textual."""

from __future__ import annotations

from collections.abc import Mapping

from rich.text import Text

from amdtop.model import FlagKind, WorkerState, WorkerStatus
from amdtop.pipeline import NodeFrame

STATE_STYLE = {
    WorkerState.READY: "green",
    WorkerState.STARTING: "yellow",
    WorkerState.STOPPING: "yellow",
    WorkerState.STOPPED: "dim",
    WorkerState.CRASHED: "bold red",
    WorkerState.ASLEEP: "cyan",
}


def _uptime(seconds: float) -> str:
    seconds = max(0, int(seconds))
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}h{m:02d}m" if h else f"{m}m{s:02d}s"


def _num(value: float | None, fmt: str = "{:.0f}") -> str:
    return "-" if value is None else fmt.format(value)


def _state_cell(w: WorkerStatus, stalled: dict[str, object], state: str) -> Text:
    """The state (``state``: its text), or ``stalled r1`` while ``worker_stalled`` names the worker (and the rank)."""
    if w.name in stalled:
        rank = stalled[w.name]
        return Text("stalled" if rank is None else f"stalled r{rank}", style="bold white on red")
    return Text(state, style=STATE_STYLE.get(w.state, ""))


def worker_key(row_key: str) -> str:
    """The worker a Workers row belongs to: ``w-NAME`` or one of its engine rows ``e-NAME/ENGINE``."""
    if row_key.startswith("e-"):
        return row_key[2:].rpartition("/")[0]
    return row_key.removeprefix("w-")


def _kv(value: float | None) -> str:
    return _num(value * 100 if value is not None else None, "{:.0f}%")


def _engine_rows(w: WorkerStatus) -> dict[str, tuple[object, ...]]:
    # One row per engine (DP replica): its own requests and KV, never summed; informational, not a TP verdict.
    rows: dict[str, tuple[object, ...]] = {}
    engines = w.engine.engines if w.engine else ()
    groups = {str(g.dp_rank): g for g in w.tp_groups()}
    for e in engines:
        group = groups.get(e.engine)
        asleep = bool(e.sleep_level)
        rows[f"e-{w.name}/{e.engine}"] = (
            Text(f"  └ engine {e.engine}", style="dim"),
            Text(f"asleep L{e.sleep_level}" if asleep else "engine", style="cyan" if asleep else "dim"),
            ",".join(map(str, group.gpus)) if group else "-",
            "",
            "",
            "",
            _num(e.running),
            _num(e.waiting),
            _kv(e.kv_cache_usage),
            _num(e.gen_tokens_per_s),
            f"dp{e.engine}",
            "",
        )
    return rows


def worker_rows(
    frame: NodeFrame, now: float, expanded: frozenset[str] | set[str] = frozenset()
) -> dict[str, tuple[object, ...]]:
    """One row per worker; a worker in ``expanded`` is followed by one row per engine."""
    rows: dict[str, tuple[object, ...]] = {}
    stalled = {f.worker: dict(f.extra).get("rank") for f in frame.flags_of(FlagKind.WORKER_STALLED) if f.worker}
    for w in frame.workers:
        e = w.engine
        many = bool(e and len(e.engines) > 1)
        mark = ("▾ " if w.name in expanded else "▸ ") if many else ""
        state = w.state.value if w.state is not WorkerState.ASLEEP or e is None else f"asleep L{e.sleep_level}"
        layout = f" {w.layout.summary()}" if w.layout is not None and not w.layout.is_plain else ""
        name = Text(mark + w.name, style="bold")
        if w.engine_kind != "vllm":
            name.append(f" {w.engine_kind}", style="magenta")  # vLLM is the default engine: only the other is named
        rows[f"w-{w.name}"] = (
            name,
            _state_cell(w, stalled, state),
            (",".join(map(str, w.gpus)) or "-") + layout,
            "-" if w.port is None else str(w.port),
            "-" if w.started_at is None or w.state is WorkerState.STOPPED else _uptime(now - w.started_at),
            str(w.restarts),
            _num(e.running if e else None),
            _num(e.waiting if e else None),
            _kv(e.kv_cache_usage if e else None),
            _num(e.gen_tokens_per_s if e else None),
            w.source,
            Text(f"✗ {w.error_line}", style="red")
            if w.state is WorkerState.CRASHED and w.error_line
            else Text(w.log_note, style="dim")  # a found server: where its log is, or why it cannot be read
            if w.log is None and w.log_note
            else "",
        )
        if w.name in expanded:
            rows.update(_engine_rows(w))
    return rows


def with_errors(
    rows: dict[str, tuple[object, ...]], errors: Mapping[str, str], width: int
) -> dict[str, tuple[object, ...]]:
    """Rows padded to ``width`` cells, the last one holding the worker's last error (empty when none)."""
    out: dict[str, tuple[object, ...]] = {}
    for key, cells in rows.items():
        error = errors.get(key.removeprefix("w-"))
        # A control failure wins; else the row's own note (a crashed worker's error line) when it brings one.
        own: object = cells[width - 1] if len(cells) >= width else ""
        note = Text(f"✗ {error}", style="bold red") if error else own
        pad = ("",) * max(0, width - len(cells) - 1)
        out[key] = (*cells[: width - 1], *pad, note)
    return out


def no_workers_text(config: object | None) -> str:
    """What the empty Workers pane says: what would fill it and how."""
    where = f"the profiles in {config}" if config else "the profiles of --config PATH"
    return f"no workers: l launches one from {where} (a [[worker]] table per worker); vLLM servers running are found"
