"""``:`` command mode, k9s style: ``:launch NAME``, ``:ramp NAME``, ``:retune NAME key=value...``, with completion.

The parser and the completer are pure functions; :class:`CommandBar` is the one-line prompt docked under the panes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.message import Message
from textual.widgets import Input, Static

from amdtop.errors import InputError
from amdtop.supervisor.retune import RETUNE_KEYS, parse_changes

if TYPE_CHECKING:
    from amdtop.pipeline import NodeFrame
    from tui.controller import Controller

VERBS: dict[str, str] = {
    "launch": "launch a stopped worker",
    "ramp": "load ramp against a worker",
    "retune": "change vllm flags (KEY=VALUE...) and restart (confirm)",
    "restart": "restart a worker (confirm)",
    "stop": "stop a worker (confirm)",
}


class CommandError(ValueError):
    """A command line that cannot run; its text is the one line shown."""


@dataclass(frozen=True, slots=True)
class Command:
    verb: str
    worker: str
    changes: dict[str, str] = field(default_factory=dict)


def parse_command(text: str, workers: Sequence[str]) -> Command:
    """``retune llama max-num-seqs=64`` -> Command; a unique prefix of a verb or a worker name is enough."""
    words = text.strip().removeprefix(":").split()
    if not words:
        raise CommandError(f"empty command; use one of: {', '.join(VERBS)}")
    verb = _unique(words[0], list(VERBS), "command")
    if len(words) < 2:
        raise CommandError(f":{verb} needs a worker: {', '.join(workers) or 'no workers'}")
    worker = _unique(words[1], list(workers), "worker")
    rest = words[2:]
    if verb != "retune" and rest:
        raise CommandError(f":{verb} takes one worker; unexpected {' '.join(rest)!r}")
    changes: dict[str, str] = {}
    if rest:
        try:
            changes = parse_changes(rest)
        except InputError as exc:
            raise CommandError(f":retune {worker}: {exc}") from None
    return Command(verb, worker, changes)


def _unique(word: str, choices: list[str], what: str) -> str:
    if word in choices:
        return word
    hits = [c for c in choices if c.startswith(word)]
    if len(hits) == 1:
        return hits[0]
    if hits:
        raise CommandError(f"{what} {word!r} is ambiguous: {', '.join(hits)}")
    raise CommandError(f"no {what} {word!r}; use one of: {', '.join(choices) or 'none'}")


def candidates(text: str, workers: Sequence[str]) -> list[str]:
    """Whole command lines that complete ``text`` (its last word)."""
    head, _, last = text.rpartition(" ")
    words = head.split()
    if not words:
        pool = list(VERBS)
    elif len(words) == 1:
        pool = list(workers)
    elif words[0] == "retune":
        # The supervisor's retune keys; env.NAME completes to ``env.`` (the name is the user's to type).
        typed = " ".join(words)
        pool = ["env." if key == "env.NAME" else f"{key}=" for key in RETUNE_KEYS if f"{key}=" not in typed]
    else:
        pool = []
    prefix = f"{head} " if head else ""
    return [prefix + c for c in pool if c.startswith(last)]


def complete(text: str, workers: Sequence[str]) -> str:
    """``text`` extended to the longest common prefix of its candidates (a space after a finished word)."""
    options = candidates(text, workers)
    if not options:
        return text
    common = options[0]
    for option in options[1:]:
        while not option.startswith(common):
            common = common[:-1]
    if len(options) == 1 and not common.endswith("="):
        common += " "
    return common if len(common) > len(text) else text


class CommandBar(Vertical):
    """The ``:`` prompt: Tab completes, Enter runs, Esc closes. Hidden until opened."""

    DEFAULT_CSS = """
    CommandBar { height: auto; display: none; background: $panel; }
    CommandBar.open { display: block; }
    CommandBar > Input { border: none; height: 1; padding: 0 1; background: $panel; }
    CommandBar > Input.-textual-compact { padding: 0 1; }
    CommandBar > #command-hint { height: 1; padding: 0 1; color: $text-muted; }
    """
    BINDINGS = [
        Binding("tab", "complete", "Complete", show=False, priority=True, id="command-complete"),
        Binding("escape", "close", "Close", show=False, id="command-close"),
    ]

    class Run(Message):
        """A parsed command from the prompt."""

        def __init__(self, command: Command) -> None:
            super().__init__()
            self.command = command

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.names: list[str] = []

    def compose(self) -> ComposeResult:
        yield Static("", id="command-hint")
        # compact: Input's own ``:focus`` rule draws a tall border (3 rows) that no plain ``border: none`` here
        # outranks, and a 1-row prompt then shows only the border, never the text typed.
        yield Input(
            placeholder="launch | ramp | retune | restart | stop  NAME  [key=value...]",
            id="command-input",
            compact=True,
        )

    def open(self, workers: Sequence[str]) -> None:
        self.names = list(workers)
        self.add_class("open")
        box = self.query_one(Input)
        box.value = ""
        self._hint("")
        box.focus()

    def action_close(self) -> None:
        self.remove_class("open")
        self.post_message(self.Closed())

    class Closed(Message):
        """The prompt closed (run or cancelled): the screen puts focus back."""

    def action_complete(self) -> None:
        box = self.query_one(Input)
        box.value = complete(box.value, self.names)
        box.cursor_position = len(box.value)
        self._hint(box.value)

    def _hint(self, text: str) -> None:
        options = candidates(text, self.names)
        if not text.split():
            line = "  ".join(f"{v}: {d}" for v, d in VERBS.items())
        else:
            line = "  ".join(o.rpartition(" ")[2] or o for o in options[:12])
        self.query_one("#command-hint", Static).update(f": {line}" if line else "")

    @on(Input.Changed, "#command-input")
    def _changed(self, event: Input.Changed) -> None:
        self._hint(event.value)

    @on(Input.Submitted, "#command-input")
    def _submitted(self, event: Input.Submitted) -> None:
        event.stop()
        try:
            command = parse_command(event.value, self.names)
        except CommandError as exc:
            self.notify(str(exc), severity="error", timeout=6)
            return
        self.action_close()
        self.post_message(self.Run(command))


def run_command(controller: Controller, command: Command, frame: NodeFrame | None) -> None:
    """Run ``command`` through the controller (the same confirmations, the same read-only rules as the keys);
    ``frame``: the one on screen (a ramp reads its worker's URL there)."""
    if controller.readonly:
        message = f":{command.verb}: not available here (read-only, or no supervisor)"
        controller.app.notify(message, severity="error", timeout=6)
        return
    if command.verb == "ramp":
        worker = None if frame is None else frame.worker(command.worker)
        if worker is not None:
            controller.ramp(worker)
        return
    actions: dict[str, Callable[[str], None]] = {
        "launch": controller.launch,
        "restart": controller.restart,
        "stop": controller.stop,
    }
    if command.verb == "retune":
        controller.retune(command.worker, command.changes)
    else:
        actions[command.verb](command.worker)
