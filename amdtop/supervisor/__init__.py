"""The worker supervisor: NUMA-pinned vLLM workers from TOML profiles (see :class:`Supervisor`)."""

from amdtop.supervisor.core import StopReport, Supervisor
from amdtop.supervisor.profiles import Profile, load_profiles, validate_profiles

__all__ = ["Profile", "StopReport", "Supervisor", "load_profiles", "validate_profiles"]
