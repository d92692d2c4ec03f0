"""The node runtime: opens the node from a :class:`NodeSpec` and publishes every frame to every subscriber.

:func:`open` (:func:`open_node`) is the one place the backend, the supervisor (under its owner thread, with its launch
gate), the monitors, the pipeline and the demo's autostart are put together; :class:`NodeRuntime` ticks the pipeline
at the one ``--interval`` and hands each frame to the dashboard, the serve, the exporter, a ramp's observer,
``export`` and ``snapshot --window`` alike.
"""

from amdtop.runtime.loop import NodeRuntime
from amdtop.runtime.node import Node, NodeParts, open_node, open_supervisor
from amdtop.runtime.spec import NodeSpec

open = open_node  # `amdtop.runtime.open(spec)`: the node service's one way in

__all__ = ["Node", "NodeParts", "NodeRuntime", "NodeSpec", "open", "open_node", "open_supervisor"]
