"""``d``: the Python stacks of each rank of the selected worker (py-spy), in a modal that can be scrolled and closed.

The node service dumps them (in-process, or the serve that runs the workers) in a thread worker (py-spy takes a
fraction of a second per rank); a missing py-spy, a denied ptrace or a rank that exits mid-dump is one line in the
modal and a notification; nothing is signalled or killed.
"""

from __future__ import annotations

from collections.abc import Callable

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.message import Message
from textual.screen import ModalScreen
from textual.widgets import Static

from amdtop.model import WorkerStatus
from amdtop.supervisor.stacks import worker_targets


class StacksScreen(ModalScreen[None]):
    DEFAULT_CSS = """
    StacksScreen { align: center middle; }
    StacksScreen > VerticalScroll { width: 95%; height: 90%; border: thick $primary; padding: 0 1; background: $surface; }
    """
    BINDINGS = [Binding("escape,q,d", "close", "Close", id="stacks-close")]

    class Dumped(Message):
        """The dump finished (``error``: py-spy could not run at all)."""

        def __init__(self, text: str, error: str | None = None) -> None:
            super().__init__()
            self.text = text
            """One block per rank: ``=== NAME rank ...`` then its stack, or ``! why`` when it could not be read."""
            self.error = error

    def __init__(self, worker: WorkerStatus, dump: Callable[[str], str]) -> None:
        """``dump``: the node service's ``stacks`` (the worker's name in, the rendered dumps out)."""
        super().__init__()
        self.worker = worker
        self.dump = dump
        self.result: StacksScreen.Dumped | None = None

    def compose(self) -> ComposeResult:
        n = len(worker_targets(self.worker))
        with VerticalScroll():
            yield Static(Text(f"Dumping the Python stacks of {self.worker.name} ({n} process(es)) with py-spy…"),
                         id="stacks-body")  # fmt: skip
            yield Static(Text("Esc closes.", style="dim"))

    def on_mount(self) -> None:
        self._dump()

    @work(thread=True, exclusive=True, exit_on_error=False, group="stacks", description="py-spy dump")
    def _dump(self) -> None:
        try:
            text = self.dump(self.worker.name)
        except Exception as exc:  # py-spy missing, the worker gone, the serve gone: one line
            self.post_message(self.Dumped("", (str(exc) or type(exc).__name__).splitlines()[0]))
            return
        self.post_message(self.Dumped(text))

    def on_stacks_screen_dumped(self, message: Dumped) -> None:
        self.result = message
        body = self.query_one("#stacks-body", Static)
        if message.error is not None:
            body.update(Text(message.error, style="bold red"))
            self.app.notify(message.error, severity="error", timeout=8)
            return
        text = Text()
        for line in message.text.splitlines():
            style = "bold" if line.startswith("=== ") else "bold red" if line.startswith("! ") else ""
            text.append(line + "\n", style=style)
        if not message.text.strip():
            text.append(f"{self.worker.name}: {self.worker.state.value}, no process to dump", style="yellow")
        body.update(text)

    def action_close(self) -> None:
        self.dismiss(None)
