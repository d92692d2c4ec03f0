"""The one node pipeline: a backend poll plus workers, logs and analyses become one immutable :class:`NodeFrame`.

The TUI, the exporter and every ``--json`` command read that frame; nothing downstream recomputes what it holds.
"""

from __future__ import annotations

from amdtop.pipeline.frame import GpuHistory, LinkBandwidth, LogCounts, NodeFrame, RampKnee, TpGroup
from amdtop.pipeline.producer import NodePipeline, WorkerSource

__all__ = [
    "GpuHistory",
    "LinkBandwidth",
    "LogCounts",
    "NodeFrame",
    "NodePipeline",
    "RampKnee",
    "TpGroup",
    "WorkerSource",
]
