"""`amdtop serve --backend nvml` on a machine without NVIDIA hardware: the real NVML backend answered by a recorded
capture (:class:`~amdtop.telemetry.nvml_replay.ReplayNvml`, which repeats each call's last recorded result once the
capture runs out, so an idle capture serves a steady idle GPU for as long as the serve runs). For measuring a
viewer against the same frames the lent H200 serves, between two trees in one sitting, where no GPU is lent.

    .venv/bin/python bench/replay_serve.py tests/fixtures/nvml/h200_health_idle_replay.json -- \\
        --interval 1 --state-dir /tmp/s --config /tmp/none.toml --listen 127.0.0.1:19400

Everything after ``--`` goes to ``amdtop serve`` (``--backend nvml`` is added).
"""

from __future__ import annotations

import sys
from pathlib import Path

from amdtop.cli.main import main
from amdtop.telemetry.nvml_replay import ReplayNvml, load_fixture

if __name__ == "__main__":
    args = sys.argv[1:]
    if len(args) < 2 or args[1] != "--":
        raise SystemExit("usage: replay_serve.py FIXTURE -- SERVE-ARGS...")
    sys.modules["pynvml"] = ReplayNvml(load_fixture(Path(args[0])))  # type: ignore[assignment]
    raise SystemExit(main(["serve", "--backend", "nvml", *args[2:]]))
