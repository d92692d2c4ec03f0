"""The demo's autostart: the simulated node shows a busy node at once, whoever opened it (the dashboard or the
serve), and only what it launched is stopped on the way out."""

from __future__ import annotations

import threading
from collections.abc import Callable

from amdtop.control import WorkerControl

FailureSink = Callable[[str, str], None]
"""Called (from the autostart thread) with a worker's name and its launch's one-line error."""


class DemoAutostart:
    """Launches the stopped demo workers in the background, cancellable; stops exactly the ones it launched."""

    def __init__(self, control: WorkerControl, on_failure: FailureSink | None = None) -> None:
        self.control = control
        self.on_failure = on_failure
        self.launched: list[str] = []
        self.failed: dict[str, str] = {}
        self._cancel = threading.Event()
        self.thread = threading.Thread(target=self._go, name="demo-autostart", daemon=True)

    def start(self) -> DemoAutostart:
        self.thread.start()
        return self

    def _go(self) -> None:
        for st in self.control.status():
            if self._cancel.is_set():
                return
            if st.pid is None:
                try:
                    self.control.launch(st.name)
                    self.launched.append(st.name)
                except Exception as exc:  # a busy port, a missing command: the node opens and says so
                    self.failed[st.name] = f"launch {st.name}: {exc}"
                    if self.on_failure is not None:
                        self.on_failure(st.name, self.failed[st.name])

    def stop(self) -> None:
        """Stop the demo workers launched so far, side by side (a lost terminal leaves seconds, not minutes)."""
        self._cancel.set()
        if self.thread.is_alive() or self.thread.ident is not None:
            self.thread.join(timeout=10)
        stoppers = [threading.Thread(target=self._stop_one, args=(name,), daemon=True) for name in self.launched]
        for t in stoppers:
            t.start()
        for t in stoppers:
            t.join(timeout=15)

    def _stop_one(self, name: str) -> None:
        try:
            self.control.stop(name)
        except Exception:
            pass
