"""Ramps run by the node service: started by a view (the dashboard, a viewer of the serve), they outlive it; every
view sees their progress and result.

One ramp per worker at a time. The newest document of each worker's last ramp is kept, so a viewer that attaches
later (or re-attaches after its terminal closed) draws the live plot or the result at once.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from amdtop.errors import InputError
from amdtop.pipeline.frame import NodeFrame
from amdtop.ramp import Ramp, RampConfig, run_blocking
from amdtop.ramp.observe import observer_from_frames
from amdtop.ramp.target import check_base_url

RampUpdate = Callable[[str, dict[str, Any], str], None]
"""(worker, ramp document, status) to every viewer."""


class NodeRamps:
    """The ramps of one node service."""

    def __init__(self, state_dir: Path, latest: Callable[[], NodeFrame], publish: RampUpdate) -> None:
        self.state_dir = state_dir
        self.latest = latest
        self.publish = publish
        self._lock = threading.Lock()
        self._running: dict[str, Ramp] = {}
        self._docs: dict[str, tuple[dict[str, Any], str]] = {}

    def start(
        self,
        worker: str,
        url: str,
        gpus: Sequence[int] | None,
        settings: dict[str, Any],
        groups: Sequence[Sequence[int]] | None = None,
    ) -> str:
        """Start a ramp against ``worker`` at ``url`` (InputError when one runs already or the URL is refused);
        ``groups``: the worker's TP groups (per-group spreads of a data-parallel worker)."""
        check_base_url(url)
        cfg = RampConfig(url=url, **settings)
        with self._lock:
            if worker in self._running:
                raise InputError(f"ramp: one already runs against {worker}; abort it first")
            ramp = Ramp(
                cfg,
                self.state_dir,
                worker=worker,
                observer=observer_from_frames(self.latest, gpus or None, groups),
                on_update=lambda result: self._update(worker, result.to_json(), "running"),
            )
            self._running[worker] = ramp
        # Published at once: a viewer attaching before the first step ends sees the ramp running.
        self._update(worker, ramp.result.to_json(), "starting")
        threading.Thread(target=self._run, args=(worker, ramp), name=f"node-ramp-{worker}", daemon=True).start()
        return f"ramp {worker}: started in the serve"

    def _run(self, worker: str, ramp: Ramp) -> None:
        try:
            run_blocking(ramp)
            doc, status = ramp.result.to_json(), ramp.status
        except Exception as exc:  # a crash of the generator must not take the serve down
            doc, status = ramp.result.to_json(), f"error: {exc}"
        with self._lock:
            self._running.pop(worker, None)
        self._update(worker, doc, status)

    def _update(self, worker: str, doc: dict[str, Any], status: str) -> None:
        with self._lock:
            self._docs[worker] = (doc, status)
        self.publish(worker, doc, status)

    def abort(self, worker: str) -> str:
        """Abort the ramp against ``worker`` (partial results kept)."""
        with self._lock:
            ramp = self._running.get(worker)
        if ramp is None:
            raise InputError(f"ramp: none runs against {worker}")
        ramp.abort()
        return f"ramp {worker}: aborting"

    def running(self, worker: str) -> bool:
        with self._lock:
            return worker in self._running

    def documents(self) -> list[tuple[str, dict[str, Any], str, bool]]:
        """(worker, newest document, status, still running) of every ramp run so far."""
        with self._lock:
            return [(w, doc, status, w in self._running) for w, (doc, status) in self._docs.items()]

    def abort_all(self) -> None:
        with self._lock:
            ramps = list(self._running.values())
        for ramp in ramps:
            ramp.abort()
