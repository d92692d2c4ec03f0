"""The node as one service: :class:`NodeService` is what the dashboard, an attached viewer and a browser tab get,
in-process (:class:`~amdtop.service.local.LocalService`) or over the serve's socket
(:class:`~amdtop.serve.client.RemoteService`)."""

from amdtop.service.api import CONTROL_OPS, WIRE_OPS, NodeService, RampSubscriber

__all__ = ["CONTROL_OPS", "WIRE_OPS", "NodeService", "RampSubscriber"]
