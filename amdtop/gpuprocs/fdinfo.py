"""Per-process GPU engine time from DRM fdinfo, as amdgpu_top reads it.

Each open DRM file of a process has ``/proc/PID/fdinfo/<fd>`` with ``drm-pdev: 0000:05:00.0``, ``drm-client-id: N``
and cumulative ``drm-engine-<name>: <ns> ns`` per engine. The fds that point at ``/dev/dri/renderD<minor>`` are
found by reading the fd links, again every :data:`RESCAN_EVERY_S` (a process with hundreds of fds costs that many
readlinks; its render fds rarely change); each tick reads only those fdinfo files. A client is counted once however
many fds share it (dup, fork). GFX and compute engine time are added up. ROCm compute work goes through KFD queues
that DRM fdinfo does not count (amdgpu_top#49): a ROCm process shows the little its render client does.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass

from amdtop.gpuprocs.engine_time import EngineRates

RESCAN_EVERY_S = 5.0
ENGINES = (b"drm-engine-gfx:", b"drm-engine-compute:")
_RENDER = "/dev/dri/renderD"


@dataclass(frozen=True, slots=True)
class ClientBusy:
    """One DRM client's engine share of a process."""

    pdev: str
    """PCI address of the device (``drm-pdev``)."""
    minor: int
    """Render minor the fd points at (a partition's own render node on a partitioned GPU)."""
    util_pct: float | None
    """Busy share since the last read, 0-100; ``None`` at the first read."""


def parse_fdinfo(data: bytes) -> tuple[str | None, str | None, int | None]:
    """(drm-pdev, drm-client-id, GFX+compute engine ns) of one fdinfo file; ``None`` where a key is missing."""
    pdev = client = None
    busy: int | None = None
    for line in data.splitlines():
        if line.startswith(b"drm-pdev:"):
            pdev = line[9:].strip().decode()
        elif line.startswith(b"drm-client-id:"):
            client = line[14:].strip().decode()
        elif line.startswith(ENGINES):
            value = line.partition(b":")[2].split()
            if value and value[0].isdigit():
                busy = (busy or 0) + int(value[0])
    return pdev, client, busy


class FdinfoEngines:
    """Reads engine time of the pids asked for under ``proc_root``."""

    def __init__(self, proc_root: str = "/proc", clock: Callable[[], float] = time.monotonic) -> None:
        """Read ``<proc_root>/PID/fd`` and ``fdinfo``."""
        self._proc = proc_root
        self._clock = clock
        self._fds: dict[int, tuple[float, list[tuple[str, int]]]] = {}
        self._rates = EngineRates()

    def _render_fds(self, pid: int, now: float) -> list[tuple[str, int]]:
        known = self._fds.get(pid)
        if known is not None and now - known[0] < RESCAN_EVERY_S:
            return known[1]
        fds: list[tuple[str, int]] = []
        base = f"{self._proc}/{pid}/fd"
        try:
            names = os.listdir(base)
        except OSError:
            names = []  # gone, or another user's process without the right to look
        for fd in names:
            try:
                target = os.readlink(f"{base}/{fd}")
            except OSError:
                continue
            if target.startswith(_RENDER) and target[len(_RENDER) :].isdigit():
                fds.append((fd, int(target[len(_RENDER) :])))
        self._fds[pid] = (now, fds)
        return fds

    def read(self, pids: Collection[int]) -> dict[int, list[ClientBusy]]:
        """Per pid, each DRM client's busy share (pids without render fds or engine keys are left out)."""
        now = self._clock()
        out: dict[int, list[ClientBusy]] = {}
        for pid in pids:
            seen: set[str] = set()
            for fd, minor in self._render_fds(pid, now):
                try:
                    with open(f"{self._proc}/{pid}/fdinfo/{fd}", "rb") as fh:
                        data = fh.read()
                except OSError:
                    self._fds.pop(pid, None)  # the fd closed: look again next tick
                    continue
                pdev, client, busy = parse_fdinfo(data)
                if pdev is None or busy is None or (client is not None and client in seen):
                    continue
                if client is not None:
                    seen.add(client)
                util = self._rates.rate((pid, client or fd), busy, now)
                out.setdefault(pid, []).append(ClientBusy(pdev, minor, util))
        for gone in [p for p in self._fds if p not in pids]:
            del self._fds[gone]
        self._rates.forget_unseen()
        return out


def process_util(clients: list[ClientBusy], bdf: str, render_minor: int | None) -> float | None:
    """A process's busy share on one GPU (``bdf``), or on one partition of it (its ``render_minor``)."""
    mine = [c for c in clients if c.pdev == bdf and (render_minor is None or c.minor == render_minor)]
    known = [c.util_pct for c in mine if c.util_pct is not None]
    if not known:
        return None
    return round(min(100.0, sum(known)), 1)
