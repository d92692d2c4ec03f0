"""Start the simulated OpenAI server as a real subprocess for ramp tests."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

import httpx


@contextmanager
def simserver(port: int, *args: str) -> Iterator[subprocess.Popen[bytes]]:
    """Run ``python -m amdtop.simserver`` on ``port`` until the block ends; waits for /health."""
    argv = [sys.executable, "-m", "amdtop.simserver", "--port", str(port), "--model", "sim", *args]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"simserver on port {port} did not start (rc={proc.poll()})")
            time.sleep(0.05)
        yield proc
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
