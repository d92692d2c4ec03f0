"""The ``gpu_lost`` flag, worded the same by every backend so their snapshots compare equal."""

from __future__ import annotations

from amdtop.model import Flag, FlagKind, GpuInfo


def lost_flag(info: GpuInfo) -> Flag:
    """The flag raised for a GPU that stopped answering (the why stays in ``GpuSample.error``)."""
    return Flag(FlagKind.GPU_LOST, f"GPU {info.index} ({info.bdf}) stopped answering", gpus=(info.index,))
