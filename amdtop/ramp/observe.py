"""What the node did during a ramp step, as the node runtime's frames show it, and where the worker's processes are.

Node data comes through :class:`NodeObserver`, a callable over the node runtime's newest frame (the dashboard's, or
the one ``amdtop ramp`` starts), so recording adds no device call and no computation of its own. The per-step
recorder that calls it is :mod:`amdtop.ramp.recorder`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import psutil

from amdtop.pipeline.frame import NodeFrame

THROTTLED_SHARE = 0.2
"""A GPU counts as throttled for an interval when a limit reason held it back this share of the time."""


@dataclass(frozen=True, slots=True)
class GpuObservation:
    """One GPU of the worker at one moment, as the node's telemetry reported it (``None`` = not given)."""

    index: int
    util_pct: float | None = None
    power_w: float | None = None
    power_cap_w: float | None = None
    throttled: bool | None = None
    """Clocks held back by power or temperature (AMD throttle status, NVML clocks-event reasons)."""
    throttle_reason: str | None = None
    xgmi_bytes_per_s: float | None = None
    """Traffic over the GPU's XGMI/NVLink links, both directions."""
    tp_group: int | None = None
    """Which of the worker's TP groups the GPU belongs to (its DP replica), ``None`` for a worker of one group."""


def group_index(groups: Sequence[Sequence[int]] | None) -> dict[int, int]:
    """GPU -> position of its TP group, for a worker of several groups (empty otherwise)."""
    if not groups or len(groups) < 2:
        return {}
    return {gpu: i for i, group in enumerate(groups) for gpu in group}


class NodeObserver(Protocol):
    """Returns the worker's GPUs as seen now; wired by the integrator to the one frame, by the CLI to a backend."""

    def __call__(self) -> Sequence[GpuObservation]: ...


def observer_from_frames(
    frame: Callable[[], NodeFrame], gpus: Sequence[int] | None = None, groups: Sequence[Sequence[int]] | None = None
) -> NodeObserver:
    """A :class:`NodeObserver` over the one frame (the TUI's): the throttle shares and fabric rates the pipeline
    already computed, read as they are; ``frame`` raises RuntimeError before the first frame (nothing observed).
    ``groups``: the worker's TP groups (a data-parallel worker has several; spreads are then judged per group)."""
    wanted = None if gpus is None else set(gpus)
    group_of = group_index(groups)

    def observe() -> Sequence[GpuObservation]:
        try:
            current = frame()
        except RuntimeError:
            return ()
        snap = current.snapshot
        rates = {g.gpu: g for g in current.fabric.gpus} if current.fabric is not None else {}
        out = []
        for g in snap.gpus:
            if g.lost or (wanted is not None and g.index not in wanted):
                continue
            share = current.throttle_of(g.index)
            worst = share.worst if share is not None else None
            throttled = None if share is None else worst is not None and worst[1] >= THROTTLED_SHARE
            rate = rates.get(g.index)
            info = snap.topology.gpu(g.index)
            both = None if rate is None else [v for v in (rate.read_bps, rate.write_bps) if v is not None]
            out.append(
                GpuObservation(
                    index=g.index,
                    util_pct=g.util_pct,
                    power_w=g.power_w,
                    power_cap_w=None if info is None else info.power_cap_w,
                    throttled=throttled,
                    throttle_reason=worst[0] if throttled and worst is not None else None,
                    xgmi_bytes_per_s=sum(both) if both else None,
                    tp_group=group_of.get(g.index),
                )
            )
        return out

    return observe


def listener_pids(port: int) -> list[int]:
    """The processes listening on TCP ``port`` here and all their descendants (the worker's API server, EngineCore,
    TP ranks); empty when none is found or /proc hides them."""
    roots: set[int] = set()
    with contextlib.suppress(psutil.Error, OSError):
        for conn in psutil.net_connections(kind="tcp"):
            if conn.status == psutil.CONN_LISTEN and conn.laddr and conn.laddr.port == port and conn.pid:
                roots.add(conn.pid)
    pids: list[int] = []
    for pid in sorted(roots):
        with contextlib.suppress(psutil.Error):
            proc = psutil.Process(pid)
            pids += [pid, *(c.pid for c in proc.children(recursive=True))]
    return list(dict.fromkeys(pids))


def url_port(url: str) -> int | None:
    """The port of a local ``url`` (loopback or this host's name), ``None`` for a remote endpoint."""
    import httpx  # at use: the attached viewer imports this module but never calls it (httpx costs 4.4 MiB RSS)

    parsed = httpx.URL(url)
    if parsed.host not in ("127.0.0.1", "localhost", "::1", "0.0.0.0") and parsed.host != _hostname():
        return None
    return parsed.port or (443 if parsed.scheme == "https" else 80)


def _hostname() -> str:
    import socket

    return socket.gethostname()


WorkerPids = Callable[[], Sequence[int]]


def default_worker_pids(url: str) -> WorkerPids:
    """The processes behind a local ``url`` (found through its listening port); none for a remote one."""
    port = url_port(url)
    return (lambda: listener_pids(port)) if port is not None else (lambda: ())
