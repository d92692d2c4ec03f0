"""The in-place load ramp: a closed-loop streaming load generator, a concurrency schedule and knee detection."""

from amdtop.ramp.knee import Knee, default_concurrencies, find_knee
from amdtop.ramp.results import RampResult
from amdtop.ramp.runner import Ramp, RampConfig, run_blocking

__all__ = ["Knee", "Ramp", "RampConfig", "RampResult", "default_concurrencies", "find_knee", "run_blocking"]
