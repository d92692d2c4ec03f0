"""The node runtime: opens the node from a :class:`NodeSpec` and publishes every frame to every subscriber.

:func:`open` is the one way in: it puts the backend, the supervisor (under its owner thread, with its launch gate),
the monitors, the pipeline and the demo's autostart together (:func:`amdtop.runtime.node.open_node`) and returns the
node's service (:class:`LocalService`, the :class:`~amdtop.service.api.NodeService` in-process), the node its private
part. :class:`NodeRuntime` ticks the pipeline at the one ``--interval`` and hands each frame to the dashboard, the
serve, the exporter, a ramp's observer, ``export`` and ``snapshot --window`` alike.
"""

from __future__ import annotations

from typing import Any

from amdtop.runtime.loop import NodeRuntime
from amdtop.runtime.node import NodeParts, open_node
from amdtop.runtime.service import LocalService
from amdtop.runtime.spec import NodeSpec


def open(spec: NodeSpec, *, readonly: bool | None = None, **options: Any) -> LocalService:
    """The service of the node ``spec`` names (``options``: :func:`~amdtop.runtime.node.open_node`'s); control is
    refused when ``readonly`` (default: the spec's ``--readonly``). Its ``close()`` closes the node."""
    node = open_node(spec, **options)
    return LocalService(node, readonly=spec.readonly if readonly is None else readonly)


__all__ = ["LocalService", "NodeParts", "NodeRuntime", "NodeSpec", "open"]
