"""Waiting for a worker to be ready (``--wait``): the same wait whoever runs the supervisor (this process, or the
serve a command is a client of)."""

from __future__ import annotations

import time
from collections.abc import Callable

from amdtop.errors import AmdtopError
from amdtop.model import WorkerState, WorkerStatus


def wait_ready(read: Callable[[], WorkerStatus], name: str, timeout: float, poll: float = 0.5) -> WorkerStatus:
    """Read ``name``'s status until it is ready; AmdtopError (with the last log line) if it crashes or times out."""
    deadline = time.monotonic() + timeout
    while True:
        st = read()
        if st.state is WorkerState.READY:
            return st
        if st.state in (WorkerState.CRASHED, WorkerState.STOPPED):
            if st.error_line is not None:
                raise AmdtopError(f"worker[{name}]: {st.state.value} before ready: {st.error_line} (log {st.log})")
            last = st.last_log_lines[-1] if st.last_log_lines else "no log output"
            raise AmdtopError(f"worker[{name}]: {st.state.value} before ready; last log line: {last}")
        if time.monotonic() >= deadline:
            raise AmdtopError(f"worker[{name}]: not ready after {timeout:g} s; see {st.log}")
        time.sleep(poll)
