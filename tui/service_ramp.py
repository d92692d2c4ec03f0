"""The ramp screen's runner in the dashboard: the node service runs the ramp, in-process or in the serve alike.

The ramp outlives its screen (and, attached, the viewer that started it); reopening ``a`` on the worker shows the
ramp the node runs or ran instead of starting another. Progress arrives as the service's ramp updates.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from amdtop.ramp import RampConfig
from amdtop.service import NodeService

if TYPE_CHECKING:
    from tui.screens.ramp import RampScreen


class ServiceRamp:
    """Start, abort and follow ``worker``'s ramp through ``service``'s ramp operations."""

    def __init__(self, service: NodeService, worker: str, gpus: tuple[int, ...] | None) -> None:
        self.service = service
        self.worker = worker
        self.gpus = gpus
        self._screen: RampScreen | None = None
        service.on_ramp(self._update)

    def bind(self, screen: RampScreen) -> None:
        self._screen = screen

    def start(self, config: RampConfig) -> None:
        """Ask the node to start the ramp (off the UI thread: a remote call waits for the serve's answer)."""
        # The key stays with the node: it fills in the worker's own (a viewer never reads it).
        settings = {k: v for k, v in asdict(config).items() if k not in ("url", "api_key")}
        self._in_thread(lambda: self.service.ramp_start(self.worker, config.url, self.gpus, settings))

    def abort(self) -> None:
        self._in_thread(lambda: self.service.ramp_abort(self.worker))

    def current(self) -> tuple[dict[str, Any], str, bool] | None:
        """The node's newest document of this worker's ramp (status, still running), if one ran."""
        try:
            docs = self.service.ramps()
        except Exception:  # the node gone or refusing: the screen starts fresh and says so when it fails
            return None
        return next(((doc, status, running) for w, doc, status, running in docs if w == self.worker), None)

    def _in_thread(self, call: Any) -> None:
        screen = self._screen
        if screen is None:
            return

        def run() -> None:
            try:
                call()
            except Exception as exc:  # the node's refusal (read-only, one already runs, a bad URL) as one line
                screen.post_message(screen.Failed(str(exc).splitlines()[0] if str(exc) else type(exc).__name__))

        screen.run_worker(run, thread=True, exit_on_error=False, group="ramp", description="ramp request")

    def _update(self, worker: str, doc: dict[str, Any], status: str, running: bool) -> None:
        screen = self._screen
        if worker == self.worker and screen is not None:
            screen.post_message(screen.Progress(doc, status, running=running))
