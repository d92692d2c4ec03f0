"""The :class:`Incident` value and its contract JSON (``incidents[]`` in ``logs parse --json`` and ``snapshot --json``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

KINDS = (
    "collective_timeout",
    "net_completion_error",
    "worker_crashed",
    "hive_reset",
    "gpu_reset",
    "correctable_errors",
    "hardware_error",
    "xid_chain",
    "ecc",
    "gpu_init_failed",
    "kernel_fault",
    "gpu_lost",
    "nvswitch_error",
    "gsp_timeout",
    "xid",
    # job-log kinds of the message catalog (amdtop/logread, issue 48)
    "peer_lost",
    "comm_init_failed",
    "nic_flap",
    "worker_died",
    "gpu_memory_fault",
    "gpu_oom",
    "startup_failed",
    "engine_dead",
    "collective_mismatch",
    "nccl_usage_error",
    "device_assert",
)
"""Every incident kind (the exporter publishes a count for each, zero included, as it does for flags)."""

MAX_EVIDENCE = 6
"""Evidence lines kept per incident: enough to see why, few enough for a pane line and a JSON document."""


@dataclass(frozen=True, slots=True)
class Incident:
    """One verdict over the lines of one thing that went wrong."""

    kind: str
    """One of :data:`KINDS`."""
    summary: str
    """One line a person would say (``rank 3 is the laggard: ...``)."""
    cause: str
    """The likely cause, from what the lines say."""
    fix: str
    """What to do about it."""
    evidence: tuple[str, ...] = ()
    """The lines that show it (the log's own text, at most :data:`MAX_EVIDENCE`)."""
    ranks: tuple[int, ...] = ()
    """Ranks concerned (those that named themselves), sorted."""
    laggard: int | None = None
    """The rank behind the others (collective timeouts), where one is."""
    op: str | None = None
    """The collective (``ALLREDUCE``...) of a timeout."""
    seq: int | None = None
    """The SeqNum the ranks timed out on (the highest, where they differ)."""
    hosts: tuple[str, ...] = ()
    """Hosts whose lines tell it."""
    devices: tuple[int, ...] = ()
    """Local device indices (``[N]`` of NCCL lines) or GPUs (kernel incidents) concerned."""
    group: str | None = None
    """Process group / communicator the incident belongs to, where printed."""
    worker: str | None = None
    """amdtop worker whose logs tell it (``None`` for ``logs parse`` and kernel incidents)."""
    signal: str | None = None
    """The signal a crashed worker died of (``SIGSEGV``)."""
    age_s: float | None = None
    """Seconds since it happened, where the log's clock says (kernel ring buffer)."""
    historic: bool = False
    """True for an old kernel fault read from the ring buffer: history, not a live alarm."""
    detail: tuple[tuple[str, Any], ...] = ()
    """More facts (``timeout_ms``, ``status``, ``vendor_err``, ``last_completed`` per rank...)."""


def incident_json(i: Incident) -> dict[str, Any]:
    """One incident as JSON (stable keys: kind, ranks, laggard, op, seq, cause, evidence, fix, and the rest)."""
    return {
        "kind": i.kind,
        "summary": i.summary,
        "ranks": list(i.ranks),
        "laggard": i.laggard,
        "op": i.op,
        "seq": i.seq,
        "cause": i.cause,
        "evidence": list(i.evidence),
        "fix": i.fix,
        "hosts": list(i.hosts),
        "devices": list(i.devices),
        "group": i.group,
        "worker": i.worker,
        "signal": i.signal,
        "age_s": None if i.age_s is None else round(i.age_s, 1),
        "historic": i.historic,
        "detail": {k: list(v) if isinstance(v, tuple) else v for k, v in i.detail},
    }
