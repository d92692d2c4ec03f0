"""``stop_on_signals``' wait sleeps on the signal wake-up pipe: a signal ends it at once, whichever thread the kernel
delivers it to, and an idle wait does not wake to look at its flag (the serve's main thread did, 5 times a second)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from amdtop.cli.common import FLAG_LOOK_S

SCRIPT = """
import sys, threading, time
from amdtop.cli.common import stop_on_signals
for _ in range(4):  # other threads the kernel may pick for a process-directed signal
    threading.Thread(target=time.sleep, args=(3600,), daemon=True).start()
wait = stop_on_signals(ignore_hangup=True)
print("waiting", flush=True)
wait()
print("stopped", flush=True)
"""


def _voluntary_switches(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("voluntary_ctxt_switches"))


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_ends_the_wait_at_once_and_an_idle_wait_sleeps(sig: signal.Signals) -> None:
    proc = subprocess.Popen([sys.executable, "-c", SCRIPT], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    try:
        assert proc.stdout.readline() == "waiting\n"
        time.sleep(0.2)
        before = _voluntary_switches(proc.pid)  # the main thread's own: /proc/PID/status is the thread group leader
        time.sleep(1.5)
        woke = _voluntary_switches(proc.pid) - before
        assert woke <= 1, f"the idle wait woke {woke} times in 1.5 s"  # a 0.2 s poll wakes 7 times
        start = time.monotonic()
        os.kill(proc.pid, sig)
        assert proc.stdout.readline() == "stopped\n"
        assert time.monotonic() - start < FLAG_LOOK_S / 2  # the wake-up, not the slow look at the flag
        assert proc.wait(timeout=10) == 0
    finally:
        proc.kill()
        proc.wait()
