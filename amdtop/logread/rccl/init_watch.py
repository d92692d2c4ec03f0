"""Time since each live communicator's init last moved: ``nccl_init_stalled`` once it stands still too long.

A finished file can say "never completed"; a live log cannot (the next line may be Init COMPLETE), so the tail
judges by time: the communicator's init state (ranks complete, the phase each rank reached, the ranks that printed
nothing) unchanged for ``stall_s`` seconds. Any change restarts the clock. Inits whose stuck ranks printed an error
are left to the error flags.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from amdtop.logread.rccl.failures import explained, init_flag
from amdtop.logread.rccl.report import Comm, LogReport
from amdtop.model import Flag, FlagKind, Topology
from amdtop.thresholds import NCCL_INIT_STALL_S

Signature = tuple[int, tuple[tuple[int, str | None], ...], tuple[int, ...]]


def _signature(comm: Comm) -> Signature:
    return (comm.init_complete, tuple((r.rank, r.phase) for r in comm.ranks), comm.missing)


class InitWatch:
    """Per ``(worker, comm)`` the monotonic and wall time its init state last changed.

    Args:
        stall_s: how long an incomplete init may stand still before it is flagged.
        clock: monotonic seconds (injected by tests).
        wall: wall-clock seconds, for the flag's ``since``.
    """

    def __init__(
        self,
        stall_s: float = NCCL_INIT_STALL_S,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.stall_s = stall_s
        self.clock = clock
        self.wall = wall
        self._seen: dict[tuple[str, str], tuple[Signature, float, float]] = {}

    def flags(self, worker: str, report: LogReport, topology: Topology | None) -> tuple[Flag, ...]:
        """``nccl_init_stalled`` for the worker's communicators whose init stood still for ``stall_s``; call every
        poll (with the worker's newest report) so the clock runs while no line arrives."""
        now = self.clock()
        out = []
        live = set()
        for comm in report.comms:
            if not comm.init_incomplete or explained(report, comm):
                continue
            key = (worker, comm.id)
            live.add(key)
            sig = _signature(comm)
            seen = self._seen.get(key)
            if seen is None or seen[0] != sig:
                self._seen[key] = seen = (sig, now, self.wall())
            if now - seen[1] >= self.stall_s:
                flag = init_flag(report, comm, topology, worker, FlagKind.NCCL_INIT_STALLED, self.stall_s)
                # since: when the init last moved (constant while it stands still, so the flag stays equal)
                out.append(
                    Flag(
                        flag.kind,
                        flag.message,
                        flag.worker,
                        flag.gpus,
                        extra=(*flag.extra, ("since", round(seen[2], 3))),
                    )
                )
        for key in [k for k in self._seen if k[0] == worker and k not in live]:
            del self._seen[key]
        return tuple(out)

    def forget(self, worker: str) -> None:
        """Drop a worker's clocks (a new launch: new communicators)."""
        for key in [k for k in self._seen if k[0] == worker]:
            del self._seen[key]
