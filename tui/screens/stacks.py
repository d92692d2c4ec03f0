"""``d``: the Python stacks of each rank of the selected worker (py-spy), in a modal that can be scrolled and closed.

The dump runs in a thread worker (py-spy takes a fraction of a second per rank); a missing py-spy, a denied ptrace or a
rank that exits mid-dump is one line in the modal and a notification; nothing is signalled or killed.
"""

from __future__ import annotations

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.message import Message
from textual.screen import ModalScreen
from textual.widgets import Static

from amdtop.errors import AmdtopError
from amdtop.model import WorkerStatus
from amdtop.supervisor.stacks import RankStack, dump_stacks, worker_targets


class StacksScreen(ModalScreen[None]):
    DEFAULT_CSS = """
    StacksScreen { align: center middle; }
    StacksScreen > VerticalScroll { width: 95%; height: 90%; border: thick $primary; padding: 0 1; background: $surface; }
    """
    BINDINGS = [Binding("escape,q,d", "close", "Close", id="stacks-close")]

    class Dumped(Message):
        """The dump finished (``error``: py-spy could not run at all)."""

        def __init__(self, stacks: list[RankStack], error: str | None = None) -> None:
            super().__init__()
            self.stacks = stacks
            self.error = error

    def __init__(self, worker: WorkerStatus, py_spy: str | None = None) -> None:
        super().__init__()
        self.worker = worker
        self.py_spy = py_spy
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
            stacks = dump_stacks(worker_targets(self.worker), py_spy=self.py_spy)
        except AmdtopError as exc:
            self.post_message(self.Dumped([], str(exc)))
            return
        self.post_message(self.Dumped(stacks))

    def on_stacks_screen_dumped(self, message: Dumped) -> None:
        self.result = message
        body = self.query_one("#stacks-body", Static)
        if message.error is not None:
            body.update(Text(message.error, style="bold red"))
            self.app.notify(message.error, severity="error", timeout=8)
            return
        text = Text()
        for s in message.stacks:
            text.append(f"=== {self.worker.name} {s.label()}\n", style="bold")
            if s.text is not None:
                text.append(s.text + "\n")
            else:
                text.append(f"! {s.error}\n", style="bold red")
        if not message.stacks:
            text.append(f"{self.worker.name}: {self.worker.state.value}, no process to dump", style="yellow")
        body.update(text)

    def action_close(self) -> None:
        self.dismiss(None)
