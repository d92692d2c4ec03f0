"""RCCL/NCCL debug log parsing, diagnosis and tailing (UI-free).

Entry points: :func:`amdtop.rccl.parser.parse_files`, :class:`amdtop.rccl.parser.LogParser` (incremental),
:func:`amdtop.rccl.diagnose.diagnose`, :class:`amdtop.rccl.tail.LogFollower`, :class:`amdtop.rccl.monitor.LogMonitor`,
:func:`amdtop.rccl.sources.worker_sources`.
"""

from amdtop.rccl.lines import ERROR, INFO, OTHER, WARN, LogBatch, LogLine, classify, make_line

__all__ = ["ERROR", "INFO", "OTHER", "WARN", "LogBatch", "LogLine", "classify", "make_line"]
