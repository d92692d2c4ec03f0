"""Supervisor costs: status() poll, stop of a 5-process worker, restart; peer: vLLM sweep tool's bare killpg(SIGKILL).

Usage: .venv/bin/python bench/supervisor.py --n 20
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from amdtop.supervisor import Supervisor
from amdtop.supervisor.procs import scan
from amdtop.telemetry.sim import SimBackend
from tests.gates import PASS

FAMILY = """
import os, time
for _ in range(2):
    if os.fork() == 0:
        os.fork()
        time.sleep(600)
time.sleep(600)
"""


def wait_count(pgid: int, n: int) -> None:
    while sum(1 for st in scan().values() if st.pgid == pgid) < n:
        time.sleep(0.005)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=20)
    n = ap.parse_args().n
    tmp = Path(tempfile.mkdtemp(prefix="amdtop-bench-sup-"))
    (tmp / "prog.py").write_text(FAMILY)
    cfg = tmp / "w.toml"
    cfg.write_text(
        f'[[worker]]\nname = "w"\nmodel = "m"\ngpus = [0]\nnuma_node = "none"\nport = 18090\n'
        f'command = ["{sys.executable}", "{tmp / "prog.py"}"]\n'
    )
    sup = Supervisor(cfg, tmp / "state", gate=PASS, topology=SimBackend().topology(), grace_s=5.0)
    status_s, stop_s, restart_s, peer_s = [], [], [], []
    for _ in range(n):
        st = sup.launch("w")
        wait_count(st.pgid or 0, 5)
        for _ in range(5):
            t = time.perf_counter()
            sup.status()
            status_s.append(time.perf_counter() - t)
        t = time.perf_counter()
        sup.restart("w")
        restart_s.append(time.perf_counter() - t)
        rec = sup.record("w")
        wait_count(rec.pgid if rec else 0, 5)
        t = time.perf_counter()
        sup.stop("w")
        stop_s.append(time.perf_counter() - t)
        # Peer: Popen in a new session, killpg(SIGKILL), wait for the group to vanish (no grace, no sweep).
        p = subprocess.Popen([sys.executable, str(tmp / "prog.py")], start_new_session=True)
        wait_count(p.pid, 5)
        t = time.perf_counter()
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
        while any(st.pgid == p.pid for st in scan().values()):
            time.sleep(0.005)
        peer_s.append(time.perf_counter() - t)
    sup.close()
    peer = statistics.median(peer_s)
    print(f"n={n}  procs in /proc: {len(scan())}")
    for label, xs in (("status() 1 worker, 5 procs", status_s), ("stop() SIGTERM+sweep", stop_s),
                      ("restart()", restart_s), ("peer killpg(SIGKILL)+wait", peer_s)):  # fmt: skip
        med = statistics.median(xs)
        print(f"{label:<30} median {med * 1000:8.2f} ms   x peer {med / peer:6.1f}")


if __name__ == "__main__":
    main()
