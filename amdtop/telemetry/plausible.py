"""Dropping implausible telemetry: a value no GPU can report (1e29 % busy, -5 % busy, negative memory, 50 kW) is a
driver or firmware glitch; it becomes unknown (``None``) rather than being shown, exported or analysed."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from amdtop.model import GpuProcess, GpuSample

MAX_BYTES = 1 << 50
"""1 PiB: no GPU holds more memory (MI300X 192 GiB, B200 192 GB)."""
MAX_POWER_W = 5000.0
"""Board/socket power above 5 kW is no reading (MI300X 750 W, GB200 superchip 2.7 kW)."""
TEMP_RANGE = (-40.0, 200.0)
"""Sensors read in this span; amdgpu and NVML report absent sensors as 0 or 511 °C and the like outside it."""
MAX_CLOCK_MHZ = 10000.0

_PERCENT = ("util_pct", "mem_util_pct")
_TEMPS = ("temp_c", "mem_temp_c")
_CLOCKS = ("sclk_mhz", "mclk_mhz")


def _finite(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _within(v: float | int | None, lo: float, hi: float) -> bool:
    return v is None or (_finite(v) and lo <= v <= hi)


def plausible(sample: GpuSample) -> GpuSample:
    """``sample`` with every implausible value replaced by ``None`` (the same object when all are plausible)."""
    drop: dict[str, Any] = {}
    for name in _PERCENT:
        if not _within(getattr(sample, name), 0.0, 100.0):
            drop[name] = None
    for name in _TEMPS:
        if not _within(getattr(sample, name), *TEMP_RANGE):
            drop[name] = None
    for name in _CLOCKS:
        if not _within(getattr(sample, name), 0.0, MAX_CLOCK_MHZ):
            drop[name] = None
    if not _within(sample.power_w, 0.0, MAX_POWER_W):
        drop["power_w"] = None
    total = sample.vram_total_bytes
    if total is not None and not (_finite(total) and 0 < total <= MAX_BYTES):
        drop["vram_total_bytes"] = None
        total = None
    used_cap = MAX_BYTES if total is None else total
    if not _within(sample.vram_used_bytes, 0, used_cap):
        drop["vram_used_bytes"] = None
    procs = sample.processes
    if any(p.vram_bytes is not None and not _within(p.vram_bytes, 0, used_cap) for p in procs):
        procs = tuple(
            GpuProcess(p.pid, p.name, None)
            if p.vram_bytes is not None and not _within(p.vram_bytes, 0, used_cap)
            else p
            for p in procs
        )
    if not drop and procs is sample.processes:
        return sample
    return replace(sample, processes=procs, **drop)
