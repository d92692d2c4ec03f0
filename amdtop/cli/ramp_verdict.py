"""``amdtop ramp``'s node observation (the node runtime's frames through :class:`NodeObserver`) and its verdict text."""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Callable, Sequence
from typing import Any

from amdtop import runtime
from amdtop.cli.common import node_spec
from amdtop.cli.served import first_frame, serve_of
from amdtop.errors import AmdtopError
from amdtop.pipeline.frame import NodeFrame
from amdtop.ramp.observe import NodeObserver, default_worker_pids, observer_from_frames


def gpu_list(text: str) -> tuple[int, ...]:
    """``--gpus 0,1,2,3`` (GPU indices, 0 allowed)."""
    try:
        values = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a comma-separated list of GPU indices, e.g. 0,1,2,3"
        ) from None
    if not values or min(values) < 0:
        raise argparse.ArgumentTypeError("needs GPU indices (0 or more), e.g. 0,1,2,3")
    return tuple(sorted(set(values)))


def _worker_gpus(snapshot: Any, pids: Sequence[int]) -> list[int]:
    wanted = set(pids)
    return [g.index for g in snapshot.gpus if any(p.pid in wanted for p in g.processes)]


def cli_observer(
    args: argparse.Namespace, url: str, gpus: Sequence[int] | None
) -> tuple[NodeObserver | None, Callable[[], None] | None, str]:
    """The node runtime's frames as a :class:`NodeObserver` over the worker's GPUs, the closer and a note.

    The runtime ticks every ``--interval`` while the ramp runs, so each step reads the frames the pipeline made
    (throttle shares, fabric rates) rather than computing its own. ``(None, None, why)`` without a node. Quiet on
    stderr: a ramp that fails to reach its URL still prints one line. The worker's GPUs are ``gpus`` when given, else
    those whose process lists hold the worker's processes, else all.
    """
    client = serve_of(args)
    if client is not None:
        # The serve's frames (its own runtime ticks them): no second poller of the node beside it.
        try:
            first = first_frame(client)
        except AmdtopError as exc:
            client.close()
            return None, None, f"none ({exc})"
        return _observer(client.frame_now, first, url, gpus, client.close, f"amdtop serve (pid {client.pid})")
    try:
        service = runtime.open(node_spec(args), follow_logs=False, kernel=False)
    except AmdtopError as exc:
        return None, None, f"none ({exc})"
    try:
        first = service.runtime.tick()
    except Exception as exc:
        service.shutdown()
        return None, None, f"none ({exc})"
    service.runtime.start()
    return _observer(service.runtime.latest, first, url, gpus, service.shutdown, service.backend_name)


def _observer(
    latest: Callable[[], NodeFrame],
    first: NodeFrame,
    url: str,
    gpus: Sequence[int] | None,
    close: Callable[[], None],
    source: str,
) -> tuple[NodeObserver | None, Callable[[], None] | None, str]:
    chosen: Sequence[int] | None = gpus
    groups: list[tuple[int, ...]] = []
    with contextlib.suppress(Exception):
        pids = default_worker_pids(url.rstrip("/"))()
        if chosen is None:
            chosen = _worker_gpus(first.snapshot, pids) or None
        groups = _tp_groups(pids, chosen)
    which = "all GPUs" if chosen is None else "GPUs " + ",".join(map(str, chosen))
    if len(groups) > 1:
        which += " in TP groups " + " ".join(",".join(map(str, g)) for g in groups)
    observer = observer_from_frames(latest, chosen, groups or None)
    return observer, close, f"{source}: {which}"


def _tp_groups(pids: Sequence[int], gpus: Sequence[int] | None) -> list[tuple[int, ...]]:
    """The TP groups of the vLLM server behind ``pids`` (a data-parallel server has several: the ramp then judges
    the GPU spread inside each), on ``gpus`` in rank order when given; empty when it is one group or not found."""
    from amdtop.analysis import discover_vllm

    found = discover_vllm(among=pids) if pids else []
    if len(found) != 1 or found[0].layout is None:
        return []
    worker = found[0]
    # The discovered rank order wins where it names the same GPUs (the process lists give them sorted by index).
    devices = worker.gpus if gpus is None or set(gpus) == set(worker.gpus) else tuple(gpus)
    return [g.gpus for g in worker.layout.groups(worker.name, devices)] if worker.layout else []


_warned: set[int] = set()


def sharing_warning(step: dict[str, Any], ramp_key: object) -> None:
    """Warn once per ramp (``ramp_key``) on stderr when the client may share cores with the worker's processes."""
    if not step.get("client_shares_cores") or id(ramp_key) in _warned:
        return
    _warned.add(id(ramp_key))
    cpus = step.get("client_shared_cpus") or "?"
    sys.stderr.write(
        f"amdtop: warning: the load generator may run on the worker's cores ({cpus}); a busy-polling engine there "
        "bunches every stream: pin the ramp elsewhere (taskset -c)\n"
    )


def render_verdict(doc: dict[str, Any]) -> str:
    """The knee's cause, its evidence and the recommendation as stderr lines."""
    knee = doc.get("knee") or {}
    if not knee:
        return ""
    lines = [f"cause: {knee.get('cause', 'unknown')}"]
    lines += [f"  - {e}" for e in knee.get("evidence") or []]
    rec = doc.get("recommendation") or {}
    changes = rec.get("changes") or {}
    if changes:
        lines.append("recommend: " + " ".join(f"{k}={v}" for k, v in changes.items()))
    lines += [f"  {a}" for a in rec.get("advice") or []]
    cmd = rec.get("command_line")
    if cmd:
        lines += [f"  {cmd['note']}:", f"    now:   {cmd['before']}", f"    after: {cmd['after']}"]
    if rec.get("pane"):
        lines.append(f"  pane: {rec['pane']}" + (f", flag: {rec['flag']}" if rec.get("flag") else ""))
    return "\n".join(lines) + "\n"
