"""App-level messages: data flows up from the poller thread and the control workers to the UI."""

from __future__ import annotations

from collections.abc import Mapping

from textual.message import Message

from amdtop.pipeline import NodeFrame


class SnapshotReady(Message):
    """A new frame from the telemetry poller; a newer one replaces an older queued one."""

    def __init__(self, frame: NodeFrame) -> None:
        super().__init__()
        self.frame = frame

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, SnapshotReady)


class PollFailed(Message):
    """A tick of the pipeline failed as a whole (the backend raised); the last frame stays on screen."""

    def __init__(self, error: str) -> None:
        super().__init__()
        self.error = error


class ServeLeft(Message):
    """The serve this viewer is attached to went away (its reason is in ``AmdtopApp.serve_gone``): the viewer exits
    with status 1."""


class ControlDone(Message):
    """A worker control action finished (``error`` true when it failed; ``worker`` the worker it acted on)."""

    def __init__(self, text: str, *, error: bool = False, worker: str | None = None) -> None:
        super().__init__()
        self.text = text
        self.error = error
        self.worker = worker


class RetuneDiffReady(Message):
    """The supervisor computed the profile diff of a retune; the UI asks for confirmation next."""

    def __init__(self, worker: str, changes: Mapping[str, str], diff: str) -> None:
        super().__init__()
        self.worker = worker
        self.changes = dict(changes)
        self.diff = diff


class WorkerError(Message):
    """Show ``text`` on the worker's row without a notification (a dialog says it already: the launch gate's)."""

    def __init__(self, worker: str, text: str) -> None:
        super().__init__()
        self.worker = worker
        self.text = text


class ProbeDone(Message):
    """The link probe saved its results and the node was asked to read them: the matrix shows GB/s from now on."""
