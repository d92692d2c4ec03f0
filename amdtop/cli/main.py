"""Entry point: parse the command line, run a headless command or open the TUI."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence
from typing import NoReturn

from amdtop import __version__
from amdtop.cli.common import add_global_options
from amdtop.cli.streams import tolerant_output
from amdtop.errors import AmdtopError

# Each module defines ``register(subparsers, parent)``: one module per command group, so groups stay independent.
COMMAND_MODULES = (
    "amdtop.cli.snapshot",
    "amdtop.cli.export",
    "amdtop.cli.workers",
    "amdtop.cli.ramp",
    "amdtop.cli.probe",
    "amdtop.cli.logs",
    "amdtop.cli.audit",
    "amdtop.cli.serve",
)


class _Parser(argparse.ArgumentParser):
    """argparse with the contract's one-line error and exit status 2."""

    def error(self, message: str) -> NoReturn:
        sys.stderr.write(f"amdtop: error: {message} (see {self.prog} --help)\n")
        raise SystemExit(2)


def build_parser() -> argparse.ArgumentParser:
    """The full parser with every registered command."""
    parser = _Parser(prog="amdtop", description="GPU node dashboard and vLLM worker controller")
    parser.add_argument("--version", action="version", version=f"amdtop {__version__}")
    add_global_options(parser, suppress=False)
    parent = _Parser(add_help=False)
    add_global_options(parent, suppress=True)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub, parent)
    return parser


Dashboard = Callable[[argparse.Namespace], int]
"""Runs the TUI: the console entry point (``tui.entry``) passes it in, since the core never imports the UI."""


def main(argv: Sequence[str] | None = None, *, dashboard: Dashboard | None = None) -> int:
    """Run amdtop; returns the exit status of the contract (0 ok, 1 runtime failure, 2 bad input)."""
    tolerant_output()
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if args.command is None or getattr(args, "ui_command", None):
            if dashboard is None:
                sys.stderr.write("amdtop: error: no command given; the dashboard opens with the `amdtop` command\n")
                return 2
            return int(dashboard(args))
        return int(args.func(args))
    except AmdtopError as exc:
        sys.stderr.write(f"amdtop: error: {exc}\n")
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # stdout closed early (``amdtop snapshot --json | head``): not an error worth a traceback.
        sys.stderr.close()
        return 1
