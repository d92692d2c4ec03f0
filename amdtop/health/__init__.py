"""GPU health from counters across polls: throttling share, new ECC errors, live fabric (XGMI/NVLink) traffic.

Pure functions over :class:`~amdtop.model.NodeSnapshot` histories (oldest first); the producer calls them, the TUI,
the exporter and ``snapshot --json`` read their results.
"""
