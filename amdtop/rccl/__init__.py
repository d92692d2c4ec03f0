"""RCCL/NCCL debug log parsing, diagnosis and tailing (UI-free).

Entry points: :func:`amdtop.rccl.files.parse_files` (also re-exported by :mod:`amdtop.rccl.parser`),
:class:`amdtop.rccl.parser.LogParser` (incremental), :func:`amdtop.rccl.diagnose.diagnose`,
:class:`amdtop.rccl.tail.LogFollower`, :class:`amdtop.rccl.monitor.LogMonitor` (its ``poll()`` returns the typed
:class:`amdtop.rccl.monitor.LogUpdate` with :class:`amdtop.rccl.views.WorkerLogs` per worker),
:func:`amdtop.rccl.sources.worker_sources`.
"""

from amdtop.rccl.lines import ERROR, INFO, OTHER, WARN, LogBatch, LogLine, classify, make_line

__all__ = ["ERROR", "INFO", "OTHER", "WARN", "LogBatch", "LogLine", "classify", "make_line"]
