"""TP groups over compute partitions: which GPUs and partitions a worker's HIP devices are, and the flag for a group
that is spread over several GPUs although it would fit on one.

On a CPX node a TP group is a set of partitions. Partitions of one GPU talk over that GPU's own fabric (KFD gives
their io_links weight 13 on real MI300X/MI308X captures, against 41 to another GPU's partitions), so a group of
``n`` ranks that fits on one GPU's partitions but is spread over two pays the inter-GPU links for nothing.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from amdtop.hip_devices import HipDevice, device_label, group_members, is_partitioned
from amdtop.model import Flag, FlagKind, Topology, WorkerState, WorkerStatus


@dataclass(frozen=True, slots=True)
class PartitionGroup:
    """A worker's TP group as devices on a partitioned node."""

    worker: str
    devices: tuple[HipDevice, ...]
    """Its HIP devices in rank order."""

    @property
    def gpus(self) -> tuple[int, ...]:
        """Physical GPUs, first-seen order."""
        return tuple(dict.fromkeys(d.gpu for d in self.devices))

    @property
    def numa_nodes(self) -> tuple[int, ...]:
        """Host NUMA nodes of its devices, sorted."""
        return tuple(sorted({d.numa_node for d in self.devices if d.numa_node is not None}))


def partition_groups(topology: Topology, workers: Iterable[WorkerStatus]) -> tuple[PartitionGroup, ...]:
    """The running workers' groups as partitions (``()`` on an unpartitioned node)."""
    if not is_partitioned(topology):
        return ()
    return tuple(
        PartitionGroup(w.name, group_members(topology, w.gpus))
        for w in workers
        if w.state is not WorkerState.STOPPED and w.gpus
    )


def _capacity(topology: Topology) -> int:
    """The most partitions one GPU offers (0 when no GPU is partitioned)."""
    return max((len(g.partitions) for g in topology.gpus), default=0)


def partition_split_flags(topology: Topology, workers: Iterable[WorkerStatus]) -> list[Flag]:
    """A ``partition_split`` flag per group spread over several GPUs whose size fits on one GPU's partitions."""
    flags: list[Flag] = []
    fits = _capacity(topology)
    for group in partition_groups(topology, workers):
        n = len(group.devices)
        if n < 2 or len(group.gpus) < 2 or n > fits:
            continue
        where = ", ".join(device_label(d) for d in group.devices)
        flags.append(
            Flag(
                FlagKind.PARTITION_SPLIT,
                f"{group.worker}: TP-{n} spread over GPUs {', '.join(map(str, group.gpus))} ({where}); "
                f"{n} partitions fit on one GPU, whose partitions talk over its own fabric",
                worker=group.worker,
                gpus=group.gpus,
                extra=(
                    ("hip_devices", tuple(d.hip_index for d in group.devices)),
                    ("numa_nodes", group.numa_nodes),
                ),
            )
        )
    return flags
