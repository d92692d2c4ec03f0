"""Per-process GPU utilisation from NVML's process utilisation samples (``nvmlDeviceGetProcessUtilization``).

NVML keeps a ring of samples per device, each ``(pid, timeStamp µs, smUtil, memUtil, encUtil, decUtil)``, and
returns those newer than the timestamp it is given. Each poll asks for the samples since the newest one seen on
that device (the device's own clock, so a recorded capture replays the same calls), and a process's utilisation is
the mean SM utilisation of its new samples. NVML answers NOT_FOUND (or SUCCESS with nothing) when no process
produced a sample since then: the processes it lists are then idle, 0 %, not unknown.
"""

from __future__ import annotations

from typing import Any

_SUCCESS, _NOT_FOUND = 0, 6
_UNSUPPORTED = frozenset({2, 3, 4, 13})  # INVALID_ARGUMENT, NOT_SUPPORTED, NO_PERMISSION, FUNCTION_NOT_FOUND
_GPU_IS_LOST = 15


class ProcessUtilization:
    """Tracks the newest sample seen per device; :meth:`read` returns ``{pid: SM %}`` or ``None`` (unsupported)."""

    def __init__(self, nvml: Any) -> None:
        """Read through ``nvml`` (the ``pynvml`` module or a replaying stand-in)."""
        self._nvml = nvml
        self._last_seen: dict[int, int] = {}
        self._unsupported: set[int] = set()

    def read(self, index: int, handle: Any) -> dict[int, float] | None:
        """SM utilisation per pid on device ``index`` since the last call; ``None`` where NVML cannot tell."""
        if index in self._unsupported:
            return None
        try:
            samples = self._nvml.nvmlDeviceGetProcessUtilization(handle, self._last_seen.get(index, 0))
        except self._nvml.NVMLError as exc:
            code = getattr(exc, "value", None)
            if code in (_SUCCESS, _NOT_FOUND):
                return {}
            if code in _UNSUPPORTED:
                self._unsupported.add(index)
                return None
            if code == _GPU_IS_LOST:
                raise
            return None  # a transient error: unknown this poll, asked again next poll
        sums: dict[int, list[float]] = {}
        newest = self._last_seen.get(index, 0)
        for s in samples:
            newest = max(newest, int(s.timeStamp))
            acc = sums.setdefault(int(s.pid), [0.0, 0.0])
            acc[0] += float(s.smUtil)
            acc[1] += 1.0
        self._last_seen[index] = newest
        return {pid: min(100.0, total / n) for pid, (total, n) in sums.items() if n}
