"""py-spy's raw stacks of a terminal program at steady state: the command runs in a 200x50 pseudo-terminal drained
like a terminal (``bench/tui_cpu.py``'s ``PtyRun``), and after ``--warmup`` seconds ``py-spy record`` samples it for
``--seconds`` (every thread, ``--idle`` off: only samples on a CPU count; ``-n`` adds native frames). The lent GPU's
answer to "which thread spends the extra, and on what" (issue 53).

    python3 bench/pty_profile.py --out /tmp/busy.raw --seconds 40 -- python3 -m tui --no-attach --readonly --backend nvml
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from tui_cpu import PtyRun


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--seconds", type=float, default=40.0)
    ap.add_argument("--warmup", type=float, default=15.0)
    ap.add_argument("--rate", type=int, default=250)
    ap.add_argument("cmd", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    run = PtyRun(cmd, 200, 50)
    end = time.monotonic() + args.warmup
    while time.monotonic() < end:
        run.pump(0.01)
    rec = subprocess.Popen(
        [spy, "record", "-r", str(args.rate), "-d", str(int(args.seconds)), "-f", "raw", "-n", "-o", args.out,
         "-p", str(run.proc.pid)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    while rec.poll() is None:
        run.pump(0.01)
    run.stop()
    if rec.returncode:
        print((rec.stderr.read() if rec.stderr else b"").decode(errors="replace"), file=sys.stderr)
    return rec.returncode or 0


if __name__ == "__main__":
    raise SystemExit(main())
