"""Prometheus exporter: the node's metrics for a fleet's Prometheus and Grafana."""

from amdtop.exporter.families import FAMILIES, FamilySpec, build_families
from amdtop.exporter.server import DEFAULT_LISTEN, CachedProvider, Exporter, parse_listen, runtime_exporter

__all__ = [
    "DEFAULT_LISTEN",
    "FAMILIES",
    "CachedProvider",
    "Exporter",
    "FamilySpec",
    "build_families",
    "parse_listen",
    "runtime_exporter",
]
