"""Bandwidth arithmetic and the expected rate of each link class.

Bus bandwidth follows nccl-tests (PERFORMANCE.md): for all-reduce, ``busbw = algbw * 2(n-1)/n`` with
``algbw = size / time``, so numbers compare across rank counts against the hardware's link speed.
"""

from __future__ import annotations

import math

from amdtop.model import GpuInfo, Link, LinkType

XGMI_GBS_PER_LINK = 48.0
"""MI300X XGMI: what RCCL models per direction per link after protocol overhead (peak 64 GB/s)."""
XGMI_PEAK_GBS_PER_LINK = 64.0
"""MI300X XGMI peak per direction per link."""
H200_NVLINK_P2P_GBS = 385.0
"""H100/H200 NVLink 4 (18 links through NVSwitch): reference p2p copy rate measured on 4x H200."""
NVLINK_GBS_PER_LINK = 25.0 * 0.85
"""Other NVLink parts: 25 GB/s per direction per link, less ~15% protocol overhead."""


def algbw_gbps(size_bytes: int, seconds: float) -> float:
    """Algorithm bandwidth: bytes per rank over time, GB/s (1e9)."""
    return size_bytes / seconds / 1e9 if seconds > 0 else 0.0


def busbw_factor(nranks: int) -> float:
    """nccl-tests all-reduce factor 2(n-1)/n (0 for one rank: nothing crosses a link)."""
    return 2.0 * (nranks - 1) / nranks if nranks > 0 else 0.0


def allreduce_busbw_gbps(size_bytes: int, seconds: float, nranks: int) -> float:
    """All-reduce bus bandwidth, GB/s."""
    return algbw_gbps(size_bytes, seconds) * busbw_factor(nranks)


def expected_p2p_gbps(link: Link, a: GpuInfo | None = None) -> float | None:
    """What a healthy link of this class should carry per direction in a p2p copy, GB/s; ``None``: no model."""
    if link.type is LinkType.XGMI:
        return XGMI_GBS_PER_LINK * max(1, link.nvlinks or 1)
    if link.type is LinkType.NVLINK:
        name = (a.name if a else "").upper()
        if "H100" in name or "H200" in name or "H800" in name or "H20" in name:
            return H200_NVLINK_P2P_GBS
        return NVLINK_GBS_PER_LINK * (link.nvlinks or 1)
    return None


def parse_size(text: str) -> int:
    """``64K``, ``16M``, ``1G`` (binary multiples) or plain bytes.

    Raises:
        ValueError: not a size.
    """
    t = text.strip().upper().removesuffix("B").removesuffix("I")
    mult = {"K": 1024, "M": 1024**2, "G": 1024**3}.get(t[-1:], 1)
    number = t[:-1] if t[-1:] in "KMG" else t
    scaled = float(number) * mult
    if not math.isfinite(scaled):
        raise ValueError(text)  # nan and inf are not sizes (int() of them raises OverflowError, not ValueError)
    value = int(scaled)
    if value <= 0:
        raise ValueError(text)
    return value


def format_size(size: int) -> str:
    """Bytes as ``1G``/``256M``/``64K``/``123``."""
    for unit, mult in (("G", 1024**3), ("M", 1024**2), ("K", 1024)):
        if size % mult == 0:
            return f"{size // mult}{unit}"
    return str(size)
