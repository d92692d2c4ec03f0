"""The floor under any Textual dashboard on this machine: an app whose only work is a one-line clock updated once a
second (run it under ``bench/tui_cpu.py``, which looks for the word ``backend`` in its output).

    .venv/bin/python bench/tui_cpu.py --runs 3 --seconds 30 -- .venv/bin/python bench/textual_floor.py

``AMDTOP_FLOOR_NVML=1``: the same app after ``import pynvml`` and ``nvmlInit()`` (the library loaded and, on a machine
with an NVIDIA driver, initialised; without one the init fails and only the import remains): the floor under a
dashboard that reads NVML in its own process (issue 53's RSS floor).
"""

from __future__ import annotations

import os
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


def load_nvml() -> None:
    import pynvml

    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:  # no driver here: the floor is Textual and the library's import
        pass


if __name__ == "__main__":
    if os.environ.get("AMDTOP_FLOOR_NVML"):
        load_nvml()
    Floor().run()
