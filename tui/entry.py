"""The ``amdtop`` console command: the core's CLI, with the dashboard for the no-command case.

It lives in the UI package because it is the one place allowed to join the two: ``amdtop/`` never imports the UI.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from amdtop.cli.main import main as cli_main


def _dashboard(args: argparse.Namespace) -> int:
    if getattr(args, "ui_command", None) == "web":
        from tui.web import run as run_web

        return run_web(args)
    from tui.launch import run  # Textual loads only when the dashboard is asked for: headless commands stay light

    return run(args)


def main(argv: Sequence[str] | None = None) -> int:
    """Run amdtop; exit status as the CLI contract says."""
    return cli_main(argv, dashboard=_dashboard)
