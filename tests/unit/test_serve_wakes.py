"""The wake gate of one viewer (amdtop/serve/wakes.py): one wake a gap runs at once, the rest are held and run as one
at the gap's end, the stronger op winning; a viewer gone leaves nothing to run."""

from __future__ import annotations

import threading

from amdtop.serve.wakes import QUEUED, WakeGate


def test_first_wake_runs_later_ones_in_the_gap_are_held_with_one_release_due_at_its_end() -> None:
    gate = WakeGate(1.0)
    assert gate.offer(1, "wake", 10.0) is None
    assert gate.offer(2, "wake", 10.25) == 0.75  # the first held: its release is due when the gap ends
    assert gate.offer(3, "request_state_files", 10.5) == QUEUED  # the release is already due
    assert gate.offer(4, "wake", 10.6) == QUEUED
    assert gate.held == 3
    assert gate.release(11.0) == ("request_state_files", [2, 3, 4])  # one op for all, the stronger one
    assert gate.held == 0
    # The release counted as the gap's wake: the next one inside the new gap is held again.
    assert gate.offer(5, "wake", 11.5) == 0.5
    assert gate.release(12.0) == ("wake", [5])
    assert gate.offer(6, "wake", 13.5) is None  # a gap with no wake: the next runs at once


def test_a_viewer_gone_runs_nothing_held_and_cancels_its_release() -> None:
    gate = WakeGate(1.0)
    assert gate.offer(1, "wake", 0.0) is None
    assert gate.offer(2, "wake", 0.1) == 0.9
    ran: list[int] = []
    timer = threading.Timer(60.0, lambda: ran.append(1))
    gate.schedule(timer)
    assert gate.close() == 1  # one place in the call budget to give back
    timer.join(5)
    assert not timer.is_alive() and ran == []  # cancelled
    assert gate.release(1.0) == (None, [])
    later = threading.Timer(60.0, lambda: ran.append(2))
    gate.schedule(later)  # closed: never started
    assert not later.is_alive()
