"""A copy of an NVML replay capture whose GPU processes are live processes here: two 40-thread Python processes (as
a busy GPU's CUDA processes are) started in their own sessions, their pids written where the capture had 477 and 478
(``tests/fixtures/nvml/h200_procs_replay.json``'s two). The dashboard then reads their procfs for real: process rows,
the found-server walk (issue 53, session 25). Prints the two pids; kill them when done.

    .venv/bin/python bench/live_pids_fixture.py tests/fixtures/nvml/h200_procs_replay.json /tmp/procs_live.json
    .venv/bin/python bench/replay_tui.py /tmp/procs_live.json --loop -- --no-attach --readonly --interval 1
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

CHILD = (
    "import threading, time\n"
    "[threading.Thread(target=time.sleep, args=(3600,), daemon=True).start() for _ in range(40)]\n"
    "time.sleep(3600)\n"
)
BUSY_CHILD = (
    "import threading, time\n"
    "[threading.Thread(target=time.sleep, args=(3600,), daemon=True).start() for _ in range(40)]\n"
    "while True:\n"
    "    end = time.perf_counter() + 0.004\n"
    "    while time.perf_counter() < end: pass\n"
    "    time.sleep(0.096)\n"
)
"""``--busy``: each child spins ~4 % of a core, as a CUDA process's launch loop keeps its CPU and RSS moving (a
little here, to leave the VM's two cores to what is measured), so its process row changes at each read."""


def main() -> int:
    args = [a for a in sys.argv[1:] if a != "--busy"]
    if len(args) != 2:
        raise SystemExit("usage: live_pids_fixture.py [--busy] CAPTURE OUT")
    child = BUSY_CHILD if "--busy" in sys.argv else CHILD
    # Their output goes nowhere: a child holding this script's stdout kept `PIDS=$(...)` waiting for it to close.
    null = subprocess.DEVNULL
    procs = [
        subprocess.Popen([sys.executable, "-c", child], start_new_session=True, stdin=null, stdout=null, stderr=null)
        for _ in range(2)
    ]
    text = Path(args[0]).read_text()
    for old, proc in zip((477, 478), procs, strict=True):
        text = re.sub(rf'"pid": {old}\b', f'"pid": {proc.pid}', text)
    Path(args[1]).write_text(text)
    print(*(p.pid for p in procs))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
