"""A launch gate that finds nothing, for tests of the supervisor's own bookkeeping (processes, records, retunes).

The supervisor takes its gate as a constructor argument; the gate's own rules are tested with real gates
(tests/unit/test_audit_gate.py, tests/tui/test_gate_everywhere.py)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


class PassingGate:
    """Lets every launch through, recording each profile it was asked about (so a test can check it was asked)."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, str]] = []

    def enforce(self, profile: Any, own_pids: Iterable[int], force: bool, action: str) -> tuple[str, ...]:
        self.asked.append((profile.name, action))
        return ()


PASS = PassingGate()
