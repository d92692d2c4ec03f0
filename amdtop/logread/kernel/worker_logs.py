"""ROCr's own fault reports in the workers' logs: ``HW Exception by GPU node-N ... reason :GPU Hang`` and ``Memory
access fault by GPU node-N ...`` are printed by the HSA runtime into the application's stderr, not the kernel log, so
the worker is known from the file. Each log is read from its start (the fault that killed a worker before amdtop was
opened is the one the operator needs) and what came before the last ``=== amdtop launch`` line is forgotten: those
faults were an earlier run's.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from amdtop.logread.kernel.events import KernelEvent
from amdtop.logread.kernel.parser import KernelLogParser
from amdtop.logread.kernel.sources import FileSource, SourceUnavailable
from amdtop.model import WorkerStatus

LAUNCH_MARK = "=== amdtop launch "
"""The line the supervisor writes into a worker's log at each launch."""


class _Followed:
    def __init__(self, source: FileSource) -> None:
        self.source = source
        self.parser = KernelLogParser()


class WorkerLogFaults:
    """Follows each worker's log for ROCr fault lines (a cheap substring test per line: logs are mostly vLLM's)."""

    def __init__(self) -> None:
        """Nothing open until a worker with a log is seen."""
        self._files: dict[tuple[str, str], _Followed] = {}

    def poll(self, workers: Sequence[WorkerStatus]) -> list[tuple[str, list[KernelEvent]]]:
        """(worker, new ROCr faults of its current run) for every worker with a log."""
        out: list[tuple[str, list[KernelEvent]]] = []
        seen: set[tuple[str, str]] = set()
        for w in workers:
            if not w.log:
                continue
            key = (w.name, w.log)
            seen.add(key)
            followed = self._files.get(key)
            if followed is None:
                try:
                    followed = self._files[key] = _Followed(FileSource(Path(w.log)))
                except SourceUnavailable:
                    continue  # not written yet (a worker that never started): tried again next poll
            try:
                lines = followed.source.read()
            except OSError:
                continue
            events: list[KernelEvent] = []
            for line in lines:
                if LAUNCH_MARK in line:
                    events = []  # an earlier run's faults
                elif "GPU node-" in line:
                    events += followed.parser.feed(line)
            if events:
                out.append((w.name, events))
        for key in [k for k in self._files if k not in seen]:
            self._files.pop(key).source.close()
        return out

    def close(self) -> None:
        """Close every log."""
        for followed in self._files.values():
            followed.source.close()
        self._files.clear()
