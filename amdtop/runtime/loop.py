"""The tick loop: one thread ticks the node pipeline every ``--interval`` and publishes every frame to subscribers.

Subscribers (the dashboard, the in-process exporter, a ramp's per-step observer, ``export``, ``snapshot --window``)
get every frame whatever is drawn: the dashboard skipping a frame behind a modal or while paused no longer starves
the others. Frames are immutable, so publishing is handing over a reference; a subscriber that fails is reported on
the error channel once (:class:`~amdtop.hub.Hub`, the viewer's end alike) and the others still get the frame.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from amdtop.hub import Hub
from amdtop.pipeline.frame import NodeFrame
from amdtop.pipeline.producer import NodePipeline

FrameSubscriber = Callable[[NodeFrame], None]
ErrorSubscriber = Callable[[str], None]


class NodeRuntime:
    """Owns the pipeline's clock: :meth:`tick` from any thread (ticks never overlap), or :meth:`start` the loop."""

    def __init__(self, pipeline: NodePipeline, interval: float = 1.0) -> None:
        """Tick ``pipeline`` every ``interval`` seconds once started."""
        if interval <= 0:
            raise ValueError(f"interval: {interval} is not a positive number of seconds")
        self.pipeline = pipeline
        self.interval = interval
        self._tick_lock = threading.Lock()
        self._publish_lock = threading.Lock()
        # The service's hubs: a subscriber that raises is shielded and reported once (the viewer's end does the same).
        self._frame_subs: Hub[FrameSubscriber] = Hub("frame")
        self._error_subs: Hub[ErrorSubscriber] = Hub("poll error")
        self._frame: NodeFrame | None = None
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self.polls = 0
        """Ticks tried (each polls the backend once), failed ones included."""
        self.last_duration_s = 0.0
        """Wall time of the last tick."""

    # -- subscribers ------------------------------------------------------------------------------------------------
    def subscribe(self, on_frame: FrameSubscriber, on_error: ErrorSubscriber | None = None) -> Callable[[], None]:
        """Call ``on_frame`` with every frame from now on (from the ticking thread); returns the unsubscribe call."""
        removals = [self._frame_subs.add(on_frame)]
        if on_error is not None:
            removals.append(self._error_subs.add(on_error))

        def unsubscribe() -> None:
            for remove in removals:
                remove()

        return unsubscribe

    def latest(self) -> NodeFrame:
        """The newest frame (RuntimeError before the first: the exporter answers 500 and says why)."""
        frame = self._frame
        if frame is None:
            raise RuntimeError("no sample yet")
        return frame

    @property
    def frame(self) -> NodeFrame | None:
        """The newest frame, ``None`` before the first."""
        return self._frame

    # -- ticking ----------------------------------------------------------------------------------------------------
    def tick(self) -> NodeFrame:
        """Tick the pipeline once and publish the frame (the tick's exception propagates after it is published)."""
        with self._tick_lock:
            start = time.perf_counter()
            self.polls += 1
            try:
                frame = self.pipeline.tick()
            except Exception as exc:
                self.last_duration_s = time.perf_counter() - start
                self._publish_error(f"poll: {exc}")
                raise
            self.last_duration_s = time.perf_counter() - start
            self._frame = frame
            # Handed over before the next tick may start: frames reach subscribers one at a time and in tick order,
            # also when a tick comes from another thread (the launch gate ticks from the supervisor's owner thread)
            # while the loop's own publishes (the serve's history and deltas follow the previous frame).
            self._publish_lock.acquire()
        try:
            self._frame_subs.publish(frame, on_error=self._publish_error)
        finally:
            self._publish_lock.release()
        return frame

    def _publish_error(self, text: str) -> None:
        self._error_subs.publish(text)

    def wake(self) -> None:
        """Tick now (a control action changed the workers); safe from any thread."""
        self.pipeline.request_workers()
        self._wake.set()

    def _wait(self) -> None:
        # One Event for stop and wake-up: a control action asks for a fresh frame at once, quitting ends the wait.
        self._wake.wait(self.interval)
        self._wake.clear()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.tick()
            except Exception:
                pass  # reported to the error subscribers; keep polling: a transient backend error is not the end
            if self._stop.is_set():
                return
            self._wait()

    def start(self) -> NodeRuntime:
        """Tick at once and then every interval in a daemon thread, until :meth:`stop`."""
        if self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(target=self._loop, name="amdtop-runtime", daemon=True)
            self._thread.start()
        return self

    @property
    def running(self) -> bool:
        """True while the loop thread runs."""
        return self._thread is not None and self._thread.is_alive()

    def stop(self, timeout: float = 10.0) -> None:
        """End the loop (the tick in progress finishes first)."""
        self._stop.set()
        self._wake.set()
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    def run_window(self, window_s: float) -> NodeFrame:
        """Tick now and every interval until ``window_s`` has passed, on this thread; the last frame
        (``snapshot --window``)."""
        end = time.monotonic() + window_s
        frame = self.tick()
        while time.monotonic() < end and not self._stop.is_set():
            self._stop.wait(min(self.interval, max(0.0, end - time.monotonic())))
            frame = self.tick()
        return frame
