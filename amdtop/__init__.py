"""amdtop: the UI-free core (telemetry, topology and NUMA model, supervisor, log parser, load ramp, CLI)."""

__version__ = "0.1.0"
