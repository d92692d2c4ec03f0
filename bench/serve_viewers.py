"""amdtop serve with viewers: the serve's CPU per tick with 0, 1 and 5 viewers; an attached `amdtop` against the
in-process dashboard (CPU and RSS, both in tmux at 200x50); frame latency serve -> viewer.

The serve runs `--demo` (the simulated 8-GPU node and its three simulated workers, real processes) at `--interval`.
Viewers for the per-tick cost are socket clients in their own processes (each receives and unpickles every frame,
as the dashboard's reader does); the dashboard comparison runs the real TUIs. Latency is a frame's `made_at` (when the
serve's pipeline finished the tick) to the moment the viewer has it unpickled, on one host's clock; each viewer's
first frame (the serve's newest at attach, up to an interval old) is left out.

    .venv/bin/python bench/serve_viewers.py --interval 0.5 --seconds 20
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

from amdtop.serve.client import ServeClient
from amdtop.serve.wire import socket_path

_SCRIPT = Path(sys.executable).with_name("amdtop")
# The installed script where there is one; else the module (the lent GPU machine runs the tree from PYTHONPATH).
AMDTOP = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-m", "amdtop"]
VIEWER = """
import sys, time
from pathlib import Path
from amdtop.serve.client import ServeClient
c = ServeClient(Path(sys.argv[1]))
lat = []
c.subscribe(lambda f: lat.append(time.time() - (f.made_at or time.time())))
time.sleep(float(sys.argv[2]))
print(" ".join(f"{x:.6f}" for x in lat[1:]), flush=True)  # the first is the newest frame at attach: not a latency
c.close()
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cpu_s(proc: psutil.Process) -> float:
    t = proc.cpu_times()
    return float(t.user + t.system)


def stats(state: Path) -> dict[str, object]:
    c = ServeClient(state)
    try:
        return dict(c.call("stats", timeout=30))
    finally:
        c.close()


def serve_cost(state: Path, serve: psutil.Process, viewers: int, seconds: float) -> dict[str, float]:
    procs = [
        subprocess.Popen([sys.executable, "-c", VIEWER, str(state), str(seconds + 2)], stdout=subprocess.PIPE, text=True)
        for _ in range(viewers)
    ]
    time.sleep(2)  # attached, first frames sent
    polls0, cpu0 = int(stats(state)["polls"]), cpu_s(serve)
    time.sleep(seconds)
    polls1, cpu1 = int(stats(state)["polls"]), cpu_s(serve)
    lat: list[float] = []
    for p in procs:
        out, _ = p.communicate(timeout=60)
        lat += [float(x) for x in out.split()]
    ticks = max(1, polls1 - polls0)
    result = {"viewers": viewers, "ticks": ticks, "serve_cpu_ms_per_tick": 1000 * (cpu1 - cpu0) / ticks}
    if lat:
        lat.sort()
        result["latency_p50_ms"] = 1000 * lat[len(lat) // 2]
        result["latency_p99_ms"] = 1000 * lat[min(len(lat) - 1, int(len(lat) * 0.99))]
        result["frames"] = len(lat)
    return result


def tui_cost(tmp: Path, argv: list[str], seconds: float, name: str) -> dict[str, float]:
    sock = f"amdtop-bench-{os.getpid()}"
    pidfile = tmp / f"{name}.pid"
    cmd = f"unset COLUMNS LINES; echo $$ > {pidfile}; exec {' '.join(argv)}"
    subprocess.run(["tmux", "-L", sock, "new-session", "-d", "-s", name, "-x", "200", "-y", "50",
                    "-eTERM=xterm-256color", "sh", "-c", cmd], check=True)  # fmt: skip
    try:
        time.sleep(8)  # started, first frames drawn
        proc = psutil.Process(int(pidfile.read_text()))
        c0 = cpu_s(proc)
        time.sleep(seconds)
        c1 = cpu_s(proc)
        rss = proc.memory_info().rss
    finally:
        subprocess.run(["tmux", "-L", sock, "kill-session", "-t", name], capture_output=True)
    time.sleep(2)
    return {"cpu_pct": 100 * (c1 - c0) / seconds, "rss_mib": rss / 2**20}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--interval", type=float, default=0.5)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--no-tui", action="store_true", help="skip the tmux dashboards (a machine without tmux)")
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="amdtop-bench-serve-"))
    state, config = tmp / "state", tmp / "none.toml"
    common = ["--state-dir", str(state), "--config", str(config), "--interval", str(a.interval)]
    serve_p = subprocess.Popen(
        [*AMDTOP, "serve", "--demo", *common, "--listen", f"127.0.0.1:{free_port()}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    out: dict[str, object] = {"interval": a.interval, "seconds": a.seconds, "load": os.getloadavg()}
    try:
        while not socket_path(state).exists():
            time.sleep(0.1)
        time.sleep(5)  # demo workers up
        serve = psutil.Process(serve_p.pid)
        out["serve"] = [serve_cost(state, serve, n, a.seconds) for n in (0, 1, 5)]
        if not a.no_tui:
            attached = tui_cost(tmp, [*AMDTOP, *common], a.seconds, "attached")
            inproc = tui_cost(tmp, [*AMDTOP, "--no-attach", "--demo", "--readonly", *common], a.seconds, "inproc")
            out["attached_viewer"] = attached
            out["in_process_dashboard"] = inproc
            out["attached_over_in_process"] = {k: attached[k] / inproc[k] for k in attached if inproc[k]}
    finally:
        serve_p.send_signal(signal.SIGTERM)
        serve_p.wait(30)
        shutil.rmtree(tmp, ignore_errors=True)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
