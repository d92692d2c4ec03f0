"""Which worker and TP rank holds each device: computed once per tick into the frame, read by every view."""

from __future__ import annotations

from collections.abc import Iterable

from amdtop.model import WorkerState, WorkerStatus

Owner = tuple[int, str, int]
"""(device index, worker, TP rank)."""


def device_owners(workers: Iterable[WorkerStatus]) -> tuple[Owner, ...]:
    """(device, worker, rank) for the devices of every worker that is not stopped, first worker first, by device.

    Given the workers as they name their devices (HIP indices) it answers per HIP device; given them on their
    physical GPUs (:func:`amdtop.hip_devices.physical_worker`) it answers per GPU.
    """
    out: dict[int, tuple[str, int]] = {}
    for w in workers:
        if w.state is WorkerState.STOPPED:
            continue
        for rank, dev in enumerate(w.gpus):
            out.setdefault(dev, (w.name, rank))
    return tuple((dev, name, rank) for dev, (name, rank) in sorted(out.items()))
