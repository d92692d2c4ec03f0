"""Analysis over snapshots and workers: TP-group imbalance, NUMA binding checks, discovery of running vLLM servers."""

from __future__ import annotations

from amdtop.analysis.discover import VllmDiscovery, discover_vllm
from amdtop.analysis.imbalance import GroupJudgement, ImbalanceTracker, group_spreads
from amdtop.analysis.numa import (
    WorkerBinding,
    numa_flags,
    topology_group_flags,
    tp_placement_flags,
    worker_binding,
)

__all__ = [
    "GroupJudgement",
    "ImbalanceTracker",
    "VllmDiscovery",
    "WorkerBinding",
    "discover_vllm",
    "group_spreads",
    "numa_flags",
    "topology_group_flags",
    "tp_placement_flags",
    "worker_binding",
]
