"""The floor under any Textual dashboard on this machine: an app whose only work is a one-line clock updated once a
second (run it under ``bench/tui_cpu.py``, which looks for the word ``backend`` in its output).

    .venv/bin/python bench/tui_cpu.py --runs 3 --seconds 30 -- .venv/bin/python bench/textual_floor.py
"""

from __future__ import annotations

import time

from textual.app import App, ComposeResult
from textual.widgets import Footer, Static


class Floor(App[None]):
    def compose(self) -> ComposeResult:
        yield Static("backend", id="clock")
        yield Footer()

    def on_mount(self) -> None:
        self.set_interval(1.0, self.tick)

    def tick(self) -> None:
        self.query_one("#clock", Static).update("backend " + time.strftime("%H:%M:%S"))


if __name__ == "__main__":
    Floor().run()
