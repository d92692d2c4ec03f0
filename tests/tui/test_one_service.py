"""The dashboard and the browser take a NodeService and never ask which one they hold: outside the two places that
open one (``tui/launch.py`` in-process, ``tui/attached.py`` over the serve's socket), nothing in ``tui/`` or
``widgets/`` names an implementation, holds the serve's connection or probes the service's capabilities."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

from tui.app import AmdtopApp

ROOT = Path(__file__).resolve().parents[2]
OPENERS = {"tui/launch.py", "tui/attached.py"}
ASKS = re.compile(
    r"serve_client|ServeClient|RemoteService|LocalService|isinstance\([^)]*(Remote|Local|Serve)"
    r"|getattr\([^)]*(service|control)|hasattr\("
)


def test_no_view_asks_which_service_it_holds() -> None:
    found = []
    for path in sorted([*ROOT.glob("tui/**/*.py"), *ROOT.glob("widgets/**/*.py")]):
        rel = path.relative_to(ROOT).as_posix()
        if rel in OPENERS:
            continue
        for n, line in enumerate(path.read_text().splitlines(), start=1):
            if ASKS.search(line):
                found.append(f"{rel}:{n}: {line.strip()}")
    assert not found, "\n".join(found)


def test_the_app_is_built_from_a_service_and_display_options_only() -> None:
    params = list(inspect.signature(AmdtopApp.__init__).parameters)
    assert params[:2] == ["self", "service"]
    assert set(params[2:]) <= {"interval", "banner", "clock", "state_dir", "watch_tty", "exporter_listen", "config_path",
                               "settle_heap"}  # fmt: skip
