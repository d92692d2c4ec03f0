"""The worker supervisor: NUMA-pinned vLLM workers from TOML profiles (see :class:`Supervisor`)."""

from amdtop.supervisor.core import Supervisor
from amdtop.supervisor.profiles import Profile, load_profiles, validate_profiles
from amdtop.supervisor.stopper import StopReport

__all__ = ["Profile", "StopReport", "Supervisor", "load_profiles", "validate_profiles"]
