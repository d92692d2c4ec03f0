"""RCCL/NCCL debug log parsing, diagnosis and tailing (UI-free)."""

from amdtop.rccl.lines import ERROR, INFO, OTHER, WARN, LogBatch, LogLine, classify, make_line

__all__ = ["ERROR", "INFO", "OTHER", "WARN", "LogBatch", "LogLine", "classify", "make_line"]
