"""RCCL/NCCL debug log parsing, diagnosis and tailing (UI-free).

Entry points: :func:`amdtop.logread.rccl.files.parse_files` (also re-exported by :mod:`amdtop.logread.rccl.parser`),
:class:`amdtop.logread.rccl.parser.LogParser` (incremental), :func:`amdtop.logread.rccl.diagnose.diagnose`,
:class:`amdtop.logread.rccl.tail.LogFollower`, :class:`amdtop.logread.rccl.monitor.LogMonitor` (its ``poll()`` returns the typed
:class:`amdtop.logread.rccl.monitor.LogUpdate` with :class:`amdtop.logread.rccl.views.WorkerLogs` per worker),
:func:`amdtop.logread.rccl.sources.worker_sources`.
"""

from amdtop.logread.rccl.lines import ERROR, INFO, OTHER, WARN, LogBatch, LogLine, classify, make_line

__all__ = ["ERROR", "INFO", "OTHER", "WARN", "LogBatch", "LogLine", "classify", "make_line"]
