"""The dashboard (`python -m tui`) with the real NVML backend answered by a recorded capture
(:class:`~amdtop.telemetry.nvml_replay.ReplayNvml`, which repeats each call's last result once the capture runs
out): the H200's frames on a machine without NVIDIA hardware, to find what repaints each second (with
``bench/tui_cpu.py --save`` and ``bench/tty_regions.py``) and compare two trees in one sitting.

    .venv/bin/python bench/tui_cpu.py --runs 2 --seconds 20 --marker nvml --save /tmp/tb -- \\
        .venv/bin/python bench/replay_tui.py tests/fixtures/nvml/h200_procs_replay.json -- \\
        --no-attach --readonly --interval 1 --state-dir /tmp/rt --config /tmp/none.toml

Everything after ``--`` goes to the dashboard (``--backend nvml`` is added). ``--no-discovery`` before ``--`` leaves
out the discovery of vLLM servers running on the host: on a shared machine other people's servers come and go, and
the relayouts they cause (a Workers row, a stall flag) land in some runs' windows and not in others'.
"""

from __future__ import annotations

import sys
from pathlib import Path

from amdtop.telemetry.nvml_replay import ReplayNvml, load_fixture

if __name__ == "__main__":
    args = sys.argv[1:]
    quiet = len(args) > 1 and args[1] == "--no-discovery"
    if quiet:
        del args[1]
        from amdtop.analysis.discover import VllmDiscovery

        VllmDiscovery.find = lambda self, gpu_pids: []  # type: ignore[method-assign]
    if len(args) < 2 or args[1] != "--":
        raise SystemExit("usage: replay_tui.py FIXTURE [--no-discovery] -- DASHBOARD-ARGS...")
    sys.modules["pynvml"] = ReplayNvml(load_fixture(Path(args[0])))  # type: ignore[assignment]
    from tui.entry import main

    sys.argv = ["amdtop", "--backend", "nvml", *args[2:]]
    raise SystemExit(main())
