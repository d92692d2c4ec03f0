"""A command as a client of the node service: the serve of the state dir when one runs (one poller, one supervisor
per state dir), else the node opened in-process (:func:`amdtop.runtime.open`)."""

from __future__ import annotations

import argparse
import time

from amdtop.cli.common import node_spec
from amdtop.errors import AmdtopError
from amdtop.pipeline.frame import NodeFrame
from amdtop.serve.client import ServeClient, attach

FIRST_FRAME_S = 30.0
"""How long a command waits for the serve's first frame (it sends its newest at once; a serve still starting takes
its first tick)."""


def serve_of(args: argparse.Namespace) -> ServeClient | None:
    """A client of the serve running for the state dir the arguments name, ``None`` when none runs."""
    spec = node_spec(args)
    return attach(spec.state_dir, readonly=spec.readonly)


def first_frame(client: ServeClient) -> NodeFrame:
    """The serve's newest frame (AmdtopError, one line, when none comes)."""
    frame = client.wait_first_frame(FIRST_FRAME_S)
    if frame is None:
        raise AmdtopError(client.gone or f"amdtop serve (pid {client.pid}): no frame in {FIRST_FRAME_S:g} s")
    return frame


def frames_over(client: ServeClient, window_s: float) -> NodeFrame:
    """The serve's newest frame once ``window_s`` has passed (``snapshot --window``: the serve's frames over it)."""
    first_frame(client)
    end = time.monotonic() + window_s
    while time.monotonic() < end and client.gone is None:
        time.sleep(min(0.1, max(0.0, end - time.monotonic())))
    return first_frame(client)
