"""Global options shared by every command, and opening the telemetry backend from them."""

from __future__ import annotations

import argparse
import json
import math
import os
import select
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

from amdtop.runtime.spec import NodeSpec
from amdtop.telemetry import BACKENDS
from amdtop.telemetry.base import TelemetryBackend
from amdtop.telemetry.sim import parse_partition


def default_config() -> Path:
    """``$XDG_CONFIG_HOME/amdtop/config.toml``."""
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "amdtop" / "config.toml"


def default_state_dir() -> Path:
    """``$XDG_STATE_HOME/amdtop``."""
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "amdtop"


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"{text} must be a finite number greater than 0; e.g. 1")
    if value > MAX_INTERVAL_S:  # time.sleep() of 1e308 s is an OverflowError, and an hour per frame is a typo
        raise argparse.ArgumentTypeError(f"{text} is more than an hour ({MAX_INTERVAL_S:g} s); e.g. 1")
    return value


MAX_INTERVAL_S = 3600.0


def _partition_mode(text: str) -> str:
    try:
        compute, memory = parse_partition(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return f"{compute}/{memory}"


def add_global_options(parser: argparse.ArgumentParser, *, suppress: bool) -> None:
    """Add the contract's global options; ``suppress`` keeps a subcommand from overriding the top-level value."""

    def d(value: Any) -> Any:
        return argparse.SUPPRESS if suppress else value

    g = parser.add_argument_group("global options")
    g.add_argument("--backend", choices=BACKENDS, default=d("auto"), help="telemetry source (default auto)")
    g.add_argument("--sysfs-root", type=Path, default=d(Path("/sys")), help="root of the sysfs tree to read")
    g.add_argument("--demo", action="store_true", default=d(False), help="simulated 8x MI300X node with workers")
    g.add_argument("--config", type=Path, default=d(None), help="worker profiles (TOML)")
    g.add_argument("--state-dir", type=Path, default=d(None), help="worker state and logs")
    g.add_argument("--interval", type=_positive_float, default=d(1.0), help="refresh period in seconds")
    g.add_argument("--readonly", action="store_true", default=d(False), help="disable every control action")
    g.add_argument("--seed", type=int, default=d(0), help="seed of the simulated node")
    g.add_argument(
        "--demo-partition",
        type=_partition_mode,
        default=d(None),
        metavar="MODE",
        help="partition mode of the simulated GPUs: SPX|DPX|QPX|CPX[/NPS1|NPS4] (e.g. CPX/NPS4); with --demo",
    )
    g.add_argument(
        "--kernel-log",
        type=Path,
        default=d(None),
        metavar="PATH",
        help="kernel messages to read for GPU faults (default /dev/kmsg, else journalctl -k); a file is read from its start, a pipe as it is written",
    )
    g.add_argument(
        "--no-attach",
        action="store_true",
        default=d(False),
        help="dashboard: poll in-process even when an amdtop serve runs for the state dir",
    )
    # The web viewers' own flag: attach or fail, never poll beside the serve (N browser tabs, one poller).
    g.add_argument("--attach-only", action="store_true", default=d(False), help=argparse.SUPPRESS)


def add_listen(parser: argparse.ArgumentParser, default: str, what: str) -> None:
    """``--listen HOST:PORT`` of a command that serves something (``what``: the help's opening words); loopback by
    default, so binding beyond it is always explicit."""
    parser.add_argument(
        "--listen",
        default=default,
        metavar="HOST:PORT",
        help=f"{what} (default {default}, loopback only; name another host explicitly)",
    )


def config_path(args: argparse.Namespace) -> Path:
    """The profile path from ``--config`` or the XDG default."""
    return Path(args.config) if args.config else default_config()


def state_dir(args: argparse.Namespace) -> Path:
    """The state dir from ``--state-dir`` or the XDG default."""
    return Path(args.state_dir) if args.state_dir else default_state_dir()


def node_spec(args: argparse.Namespace, **overrides: Any) -> NodeSpec:
    """The node the global options name, typed: what :func:`amdtop.runtime.open` opens (``overrides``: fields a
    command fixes, e.g. ``readonly``)."""
    kernel_log = getattr(args, "kernel_log", None)
    fields: dict[str, Any] = {
        "config": config_path(args),
        "state_dir": state_dir(args),
        "backend": getattr(args, "backend", "auto"),
        "sysfs_root": Path(getattr(args, "sysfs_root", None) or "/sys"),
        "demo": bool(getattr(args, "demo", False)),
        "interval": float(getattr(args, "interval", 1.0)),
        "readonly": bool(getattr(args, "readonly", False)),
        "seed": int(getattr(args, "seed", 0)),
        "demo_partition": getattr(args, "demo_partition", None),
        "kernel_log": None if kernel_log is None else Path(kernel_log),
    }
    return NodeSpec(**{**fields, **overrides})


def open_from_args(args: argparse.Namespace) -> TelemetryBackend:
    """Open the backend the arguments ask for (``--demo`` means ``sim``)."""
    return node_spec(args).open_backend()


def print_json(doc: Any) -> None:
    """Write one JSON document to stdout (and nothing else)."""
    json.dump(doc, sys.stdout, indent=2)
    sys.stdout.write("\n")


def stop_on_signals(*, ignore_hangup: bool = False) -> Callable[[], None]:
    """Catch SIGINT and SIGTERM (Ctrl-C, systemd's stop) from now on; returns what blocks until one came. With
    ``ignore_hangup`` a closed terminal (SIGHUP) is ignored. Call it before saying "Ctrl-C stops".

    The handler only sets a flag: a handler that takes a lock (``Event.set``) deadlocks when a second signal lands
    while the first one's handler holds it, and the process then ignores INT and TERM for good. The handlers stay
    installed after the wait returns, so the rest of a burst of signals cannot cut the caller's cleanup short with a
    KeyboardInterrupt: the caller is on its way out.

    The wait sleeps on the interpreter's signal wake-up pipe, so a process that only waits (the serve's main thread)
    wakes for a signal, not five times a second to look at the flag. The kernel may deliver the signal to any thread;
    the interpreter writes the pipe whichever it was. A slow look at the flag covers a wake-up fd someone else took.
    """
    stopped: list[int] = []

    def _stop(signum: int, frame: FrameType | None) -> None:
        stopped.append(signum)  # a list append takes no lock a signal could find held

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, _stop)
    if ignore_hangup:
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
    wake_r, wake_w = os.pipe()
    for fd in (wake_r, wake_w):
        os.set_blocking(fd, False)  # the interpreter refuses a blocking wake-up fd; a full pipe must not block it
    signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)

    def wait() -> None:
        while not stopped:
            # A signal's handler runs before the loop looks at the flag again (the interpreter checks for pending
            # handlers on the loop's jump back), so a woken wait sees the flag set.
            if select.select([wake_r], [], [], FLAG_LOOK_S)[0]:
                try:
                    os.read(wake_r, 512)
                except BlockingIOError:
                    pass

    return wait


FLAG_LOOK_S = 5.0
"""The wait's look at the stop flag without a wake-up (another part of the process took the wake-up fd)."""
