"""vLLM-like log lines (and RCCL-like init lines with NCCL_DEBUG=INFO) so log panes have something real to follow."""

from __future__ import annotations

import os
import socket
import sys
import time
from collections.abc import Sequence
from typing import TextIO

from amdtop.simserver.rccl_lines import tp_init_lines, tp_ranks
from amdtop.telemetry.sim import MI300X_BDFS


class SimLog:
    """Writes lines to stdout and, when given, appends them to a log file."""

    def __init__(self, path: str | None) -> None:
        self._file: TextIO | None = open(path, "a", encoding="utf-8") if path else None  # noqa: SIM115
        self.pid = os.getpid()

    def raw(self, line: str) -> None:
        """One line as is."""
        for out in (sys.stdout, self._file):
            if out is None:
                continue
            try:
                out.write(line + "\n")
                out.flush()
            except (OSError, ValueError):
                pass  # a closed pipe must not kill the server

    def info(self, where: str, msg: str, level: str = "INFO", proc: str = "APIServer") -> None:
        """A vLLM-formatted line: ``(APIServer pid=N) INFO mm-dd HH:MM:SS [file.py:line] msg``."""
        stamp = time.strftime("%m-%d %H:%M:%S")
        self.raw(f"({proc} pid={self.pid}) {level} {stamp} [{where}] {msg}")

    def access(self, peer: str, method: str, path: str, status: int) -> None:
        """A uvicorn access line."""
        reason = {200: "OK", 404: "Not Found", 500: "Internal Server Error", 400: "Bad Request"}.get(status, "")
        self.raw(f'INFO:     {peer} - "{method} {path} HTTP/1.1" {status} {reason}')

    def close(self) -> None:
        """Close the log file."""
        if self._file is not None:
            self._file.close()
            self._file = None


def rccl_init_lines(
    tp: int, pid: int, *, bdfs: Sequence[str] = (), p2p: bool = True, host: str | None = None
) -> list[str]:
    """RCCL init output of a ``tp``-rank job (one process per rank, pids after ``pid``) on the GPUs at ``bdfs``.

    Without ``bdfs`` the simulated MI300X node's first ``tp`` GPUs; ``p2p=False`` is ``NCCL_P2P_DISABLE=1``: RCCL
    then connects the ranks through host shared memory (``SHM/direct``).
    """
    if tp < 2:
        return []
    addresses = list(bdfs)[:tp] if len(bdfs) >= tp else list(MI300X_BDFS[:tp])
    ranks = tp_ranks(host or socket.gethostname().split(".")[0], pid + 1, addresses)
    return tp_init_lines(ranks, None if p2p else (lambda _a, _b: "SHM/direct"))
