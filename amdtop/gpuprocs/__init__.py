"""Every process on the GPUs: rows for the frame, host facts through psutil, engine time from DRM fdinfo, signals."""

from amdtop.gpuprocs.host import HostInfo, HostProcs, NoHost, ProcessHost
from amdtop.gpuprocs.rows import FOREIGN, GpuProcessTotal, ProcessRow, ProcessTable, build_rows, gpu_pids

__all__ = [
    "FOREIGN",
    "GpuProcessTotal",
    "HostInfo",
    "HostProcs",
    "NoHost",
    "ProcessHost",
    "ProcessRow",
    "ProcessTable",
    "build_rows",
    "gpu_pids",
]
