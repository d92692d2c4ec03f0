"""How far a rank got through communicator init, from the lines it printed (amd.md §6: Init START, the topology
line, Trees, the channel connections, Connected all rings/trees, coll channels, Init COMPLETE).

A rank whose lines stop before ``complete`` hung or died there; the phase it reached says where to look (bootstrap
and network: before ``topology``; P2P/IPC or the NIC: ``connecting``).
"""

from __future__ import annotations

PHASES = (
    "init start",
    "topology",
    "trees",
    "connecting",
    "rings connected",
    "trees connected",
    "tuning",
    "complete",
)
"""Init phases in the order RCCL/NCCL print them."""

INIT_START, TOPOLOGY, TREES, CONNECTING, RINGS, TREES_CONNECTED, TUNING, COMPLETE = range(len(PHASES))


def phase_name(index: int) -> str | None:
    """The phase's name, ``None`` for a rank that printed no init line."""
    return PHASES[index] if 0 <= index < len(PHASES) else None
