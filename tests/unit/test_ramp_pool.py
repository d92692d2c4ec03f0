"""The generator's pool: exactly C connections, reused across requests (checked from the server's access log)."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest

from amdtop.ramp.client import LoadSpec, run_step
from tests.unit.simproc import simserver

pytestmark = pytest.mark.timeout(60)


def test_closed_loop_holds_exactly_c_connections(tmp_path: Path) -> None:
    log = tmp_path / "sim.log"
    with simserver(18118, "--capacity", "8", "--tokens-per-s", "200", "--ttft-ms", "2", "--log-file", str(log)):
        spec = LoadSpec("http://127.0.0.1:18118", "sim", ("a b c",), 3, 3)
        step, reason = asyncio.run(run_step(spec, 3, warmup_s=0.2, duration_s=0.8))
    assert reason is None
    peers = re.findall(r'INFO:     (\S+) - "POST /v1/completions', log.read_text())
    assert len(peers) >= step.all_requests > 3 * 5  # many requests ...
    assert len(set(peers)) == 3  # ... over exactly three kept-alive connections
    assert step.client_cpu_s > 0 and step.wall_s >= 1.0


def test_chat_endpoint_skips_the_role_opener(tmp_path: Path) -> None:
    with simserver(18120, "--capacity", "4", "--tokens-per-s", "200", "--ttft-ms", "2"):
        spec = LoadSpec("http://127.0.0.1:18120", "sim", ("a b c",), 3, 5, chat=True)
        step, reason = asyncio.run(run_step(spec, 2, warmup_s=0.1, duration_s=0.5))
    doc = step.to_json()
    assert reason is None and doc["completed"] > 0 and doc["failed"] == 0
    # no usage chunk is missing: 5 tokens each, and 4 gaps between 5 content chunks (the role opener is not one)
    assert doc["total_output_tokens"] == 5 * doc["completed"]
    assert all(len(r.itl) == 4 for r in step.results)
