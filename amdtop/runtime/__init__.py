"""The node runtime: opens the node from the arguments and publishes every frame to every subscriber.

:func:`open_node` is the one place the backend, the supervisor (under its owner thread), the monitors and the
pipeline are put together; :class:`NodeRuntime` ticks the pipeline at the one ``--interval`` and hands each frame to
the dashboard, the exporter, a ramp's observer, ``export`` and ``snapshot --window`` alike.
"""

from amdtop.runtime.loop import NodeRuntime
from amdtop.runtime.node import Node, open_node, open_supervisor

__all__ = ["Node", "NodeRuntime", "open_node", "open_supervisor"]
