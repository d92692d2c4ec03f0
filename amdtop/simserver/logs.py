"""vLLM-like log lines (and RCCL-like init lines with NCCL_DEBUG=INFO) so log panes have something real to follow."""

from __future__ import annotations

import os
import socket
import sys
import time
from typing import TextIO


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


def rccl_init_lines(tp: int, pid: int, comm: str = "0x55d0c0a1b2c0") -> list[str]:
    """RCCL-like communicator init lines for ``tp`` ranks (one process per rank, as vLLM's mp workers)."""
    if tp < 2:
        return []
    host = socket.gethostname().split(".")[0]
    bus = [f"{0x05 + 0x21 * r:x}000" for r in range(tp)]
    lines = [f"{host}:{pid + 1}:{pid + 1} [0] NCCL INFO RCCL version : 2.22.3-HEAD:271856d"]
    for r in range(tp):
        p = pid + 1 + r
        pre = f"{host}:{p}:{p + 40} [{r}] NCCL INFO"
        lines.append(
            f"{pre} ncclCommInitRank comm {comm} rank {r} nranks {tp} cudaDev {r} nvmlDev {r} busId {bus[r]} "
            f"commId 0x551d06754c6bacf2 - Init START"
        )
        lines.append(f"{pre} comm {comm} rank {r} nRanks {tp} nNodes 1 localRanks {tp} localRank {r} MNNVL 0")
        for ch in range(2):
            nxt = (r + 1) % tp
            lines.append(
                f"{pre} Channel {ch:02d}/0 : {r}[{bus[r]}] -> {nxt}[{bus[nxt]}] via P2P/IPC comm {comm} nRanks {tp:02d}"
            )
        lines.append(f"{pre} Connected all rings comm {comm} nRanks {tp:02d} busId {bus[r]}")
        lines.append(
            f"{pre} ncclCommInitRank comm {comm} rank {r} nranks {tp} cudaDev {r} nvmlDev {r} busId {bus[r]} "
            f"commId 0x551d06754c6bacf2 localSize 328 used 67129296 bytes on core {r} - Init COMPLETE"
        )
    return lines
