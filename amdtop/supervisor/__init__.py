"""The worker supervisor: NUMA-pinned vLLM workers from TOML profiles (see :class:`Supervisor`).

The names below load on first use (PEP 562): importing a light submodule (``retune``, ``stopper``, ``metrics``) must
not load the supervisor's core (tomlkit, the process scans), which the attached viewer never runs (~2.5 MiB RSS).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from amdtop.supervisor.core import Supervisor
    from amdtop.supervisor.profiles import Profile, load_profiles, validate_profiles
    from amdtop.supervisor.stopper import StopReport

__all__ = ["Profile", "StopReport", "Supervisor", "load_profiles", "validate_profiles"]

_HOMES = {
    "Supervisor": "amdtop.supervisor.core",
    "Profile": "amdtop.supervisor.profiles",
    "load_profiles": "amdtop.supervisor.profiles",
    "validate_profiles": "amdtop.supervisor.profiles",
    "StopReport": "amdtop.supervisor.stopper",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value
