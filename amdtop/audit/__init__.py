"""The tuning checklist: rules that read the node and each worker and say what silently costs throughput.

One registry (:mod:`amdtop.audit.registry`) holds every rule; ``amdtop audit``, the dashboard's Audit screen, the
exporter and the launch gate (:mod:`amdtop.audit.gate`) all run rules from it, so a check exists once.
"""

from amdtop.audit.model import AuditReport, Finding, Fix, Skipped
from amdtop.audit.registry import run_audit

__all__ = ["AuditReport", "Finding", "Fix", "Skipped", "run_audit"]
