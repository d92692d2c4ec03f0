"""``amdtop workers adopt NAME [--yes] [--as PROFILE]``: a profile from a running server amdtop did not start."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from amdtop.cli.common import default_config
from amdtop.errors import AmdtopError, InputError, NoGpuFound
from amdtop.model import WorkerStatus
from amdtop.secrets import mask_command_line


def register(wsub: Any, parent: argparse.ArgumentParser) -> None:
    """Add ``workers adopt``."""
    p = wsub.add_parser(
        "adopt", parents=[parent],
        help="write a profile from a running server amdtop did not start (vllm-PID, sglang-PID): its argv and env",
    )  # fmt: skip
    p.add_argument("name", metavar="NAME", help="the found server's name (vllm-PID or sglang-PID, as snapshot lists)")
    p.add_argument("--as", dest="as_name", default=None, metavar="PROFILE", help="the profile's name (default ENGINE-PORT, e.g. vllm-8000)")
    p.add_argument("--yes", action="store_true", help="write without asking")
    p.set_defaults(func=run_adopt)


def found_server(name: str) -> WorkerStatus:
    """The running server amdtop did not start called ``name`` (InputError naming those found otherwise)."""
    from amdtop.analysis import discover_vllm

    found = discover_vllm()
    hit = next((w for w in found if w.name == name), None)
    if hit is None:
        names = ", ".join(w.name for w in found) or "none"
        raise InputError(f"{name}: no server amdtop did not start runs under that name; found: {names}")
    return hit


def node_gpus(args: argparse.Namespace) -> tuple[int, ...]:
    """The node's GPU indices (none on a host without GPUs: its servers run on the CPU)."""
    from amdtop.cli.common import node_spec
    from amdtop.telemetry.sim import SimBackend

    try:
        backend = node_spec(args).open_backend()
    except NoGpuFound:
        return ()
    try:
        return tuple(g.index for g in backend.topology().gpus)
    finally:
        if not isinstance(backend, SimBackend):
            backend.close()


def confirm(question: str) -> bool:
    """``question [y/N]`` on a terminal; False without one (``--yes`` is then the way to say yes)."""
    if not sys.stdin.isatty():
        return False
    sys.stderr.write(f"{question} [y/N] ")
    sys.stderr.flush()
    return sys.stdin.readline().strip().lower() in ("y", "yes")


def run_adopt(args: argparse.Namespace) -> int:
    """Show the profile the running server gives; write it into the profile file after a confirmation."""
    from amdtop.cli.workers import Workers
    from amdtop.procinfo import read_cmdline, read_environ
    from amdtop.supervisor.adopt import adopt_profile
    from amdtop.supervisor.retune import write_profile_file

    worker = found_server(args.name)
    argv = read_cmdline(worker.pid or 0)
    env = read_environ(worker.pid or 0)
    adopted = adopt_profile(worker, argv, env, profile_name=args.as_name, node_gpus=node_gpus(args))
    config = Path(args.config) if args.config else default_config()
    sys.stdout.write(f"# running: {mask_command_line(argv)}\n{adopted.toml}")
    if not env:
        sys.stderr.write(f"amdtop: warning: {args.name}'s environment is unreadable (another user's process)\n")
    if args.readonly:
        raise InputError("--readonly: adopt is disabled; run amdtop without --readonly to write profiles")
    if not (args.yes or confirm(f"add worker {adopted.name} to {config}?")):
        raise AmdtopError(f"{args.name}: not adopted; add --yes to write it to {config}")
    if not config.parent.is_dir():
        raise InputError(f"--config: {config.parent} does not exist; create it or give another --config")
    if not os.path.lexists(config):
        write_profile_file(config, "")  # the profile file adopt starts (0600, as every file amdtop writes)
    # Written by the node service of this state dir (the serve's, when one runs): one supervisor per state dir.
    workers = Workers(args)
    try:
        line = workers.control.adopt(args.name, adopted.name)
    finally:
        workers.close()
    sys.stderr.write(
        f"{line}\nin {config}; its next start is amdtop's: stop it (kill -TERM {worker.pid}), then "
        f"amdtop workers launch {adopted.name}\n"
    )
    return 0
