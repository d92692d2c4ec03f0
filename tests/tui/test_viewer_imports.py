"""The attached viewer's import path stays light (issue 25: its RSS must stay under nvitop's).

The viewer parses the command line (every command module registers), imports the app and attaches; the ramp's load
generator (httpx), the exporter's prometheus_client, the ramp chart (textual-plotext), the supervisor's core and
tomlkit are loaded only when a ramp runs, an exporter starts or workers are supervised in-process.
"""

from __future__ import annotations

import json
import subprocess
import sys

HEAVY = ("httpx", "prometheus_client", "textual_plotext", "tomlkit", "amdtop.supervisor.core")

_PROBE = """
import json, sys
import amdtop.cli.main, tui.app, tui.attached, tui.entry, tui.launch
amdtop.cli.main.build_parser()
print(json.dumps(sorted(sys.modules)))
"""


def test_viewer_import_path_leaves_out_the_heavy_modules() -> None:
    out = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, check=True).stdout
    loaded = set(json.loads(out))
    assert "tui.app" in loaded  # the probe imported what the viewer imports
    assert [m for m in HEAVY if m in loaded] == []


def test_the_lazy_names_still_resolve() -> None:
    # The PEP 562 names of amdtop.supervisor and the lazily imported pieces load on use.
    probe = (
        "from amdtop.supervisor import Supervisor, StopReport, load_profiles; "
        "from amdtop.exporter import Exporter; e = Exporter(lambda: None, listen='127.0.0.1:0'); "
        "import sys; print(all(m in sys.modules for m in ('amdtop.supervisor.core', 'prometheus_client', 'tomlkit')))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "True"
