"""What the dashboard may ask of a worker controller: the supervisor, or a test double of it."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

from amdtop.model import WorkerStatus

DemoLoad = Callable[[Sequence[WorkerStatus]], None]
"""Sets the simulated GPUs' load from the demo workers' status (demo mode only): the supervisor makes one, the node
pipeline calls it each tick."""


class StopResult(Protocol):
    """What a stop reports back (the supervisor's ``StopReport``)."""

    @property
    def message(self) -> str: ...


class WorkerControl(Protocol):
    """Launch, stop, restart and retune workers by name; every call blocks, so the UI calls from a thread worker."""

    def status(self) -> list[WorkerStatus]: ...

    def launch(self, name: str, force: bool = False) -> WorkerStatus: ...

    def stop(self, name: str) -> StopResult | str: ...

    def restart(self, name: str, grace: float | None = None, force: bool = False) -> WorkerStatus: ...

    def retune_diff(self, name: str, changes: Mapping[str, str]) -> str: ...

    def retune(self, name: str, changes: Mapping[str, str]) -> WorkerStatus: ...

    def close(self) -> None: ...
