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


def main() -> int:
    if len(sys.argv) != 3:
        raise SystemExit("usage: live_pids_fixture.py CAPTURE OUT")
    procs = [subprocess.Popen([sys.executable, "-c", CHILD], start_new_session=True) for _ in range(2)]
    text = Path(sys.argv[1]).read_text()
    for old, proc in zip((477, 478), procs, strict=True):
        text = re.sub(rf'"pid": {old}\b', f'"pid": {proc.pid}', text)
    Path(sys.argv[2]).write_text(text)
    print(*(p.pid for p in procs))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
