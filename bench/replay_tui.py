"""The dashboard (`python -m tui`) with the real NVML backend answered by a recorded capture
(:class:`~amdtop.telemetry.nvml_replay.ReplayNvml`, which repeats each call's last result once the capture runs
out): the H200's frames on a machine without NVIDIA hardware, to find what repaints each second (with
``bench/tui_cpu.py --save`` and ``bench/tty_regions.py``) and compare two trees in one sitting.

    .venv/bin/python bench/tui_cpu.py --runs 2 --seconds 20 --marker nvml --save /tmp/tb -- \\
        .venv/bin/python bench/replay_tui.py tests/fixtures/nvml/h200_procs_replay.json -- \\
        --no-attach --readonly --interval 1 --state-dir /tmp/rt --config /tmp/none.toml

Everything after ``--`` goes to the dashboard (``--backend nvml`` is added). ``--no-discovery`` before ``--`` leaves
out the discovery of vLLM servers running on the host: on a shared machine other people's servers come and go, and
the relayouts they cause (a Workers row, a stall flag) land in some runs' windows and not in others'. ``--loop``
before ``--`` replays each call's recorded answers round and round instead of holding the last one: a busy capture of
11 polls then keeps its values moving through a window longer than 11 s, as a busy GPU's do (the counters step back
once a lap; the history and the rows move every second, which is what a busy window measures).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, SupportsIndex

from amdtop.telemetry.nvml_replay import ReplayNvml, load_fixture


class _Lap(list[Any]):
    """A call's recorded answers read round and round: ``ReplayNvml`` takes ``results[min(i, len - 1)]``."""

    def __len__(self) -> int:
        return sys.maxsize

    def __getitem__(self, i: SupportsIndex | slice) -> Any:  # type: ignore[override]
        if isinstance(i, slice):
            return list(self)[i]
        return list.__getitem__(self, int(i) % list.__len__(self))


def looped(fixture: dict[str, Any]) -> dict[str, Any]:
    calls = fixture["calls"]
    fixture["calls"] = {key: _Lap(results) if len(results) > 1 else results for key, results in calls.items()}
    return fixture


if __name__ == "__main__":
    args = sys.argv[1:]
    opts = set()
    while len(args) > 1 and args[1] in ("--no-discovery", "--loop"):
        opts.add(args.pop(1))
    if "--no-discovery" in opts:
        from amdtop.analysis.discover import VllmDiscovery

        VllmDiscovery.find = lambda self, gpu_pids: []  # type: ignore[method-assign]
    if len(args) < 2 or args[1] != "--":
        raise SystemExit("usage: replay_tui.py FIXTURE [--no-discovery] [--loop] -- DASHBOARD-ARGS...")
    fixture = load_fixture(Path(args[0]))
    sys.modules["pynvml"] = ReplayNvml(looped(fixture) if "--loop" in opts else fixture)  # type: ignore[assignment]
    from tui.entry import main

    sys.argv = ["amdtop", "--backend", "nvml", *args[2:]]
    raise SystemExit(main())
