"""Telemetry backends and the ``--backend`` choice."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import cast

from amdtop.errors import BackendUnavailable, InputError, NoGpuFound
from amdtop.telemetry.base import BackendOptions, TelemetryBackend

BACKENDS = ("auto", "amdsmi", "sysfs", "nvml", "sim", "none")
AUTO_ORDER = ("amdsmi", "sysfs", "nvml")

_MODULES = {
    "amdsmi": "amdtop.telemetry.amdsmi_backend",
    "sysfs": "amdtop.telemetry.sysfs",
    "nvml": "amdtop.telemetry.nvml",
    "sim": "amdtop.telemetry.sim",
    "none": "amdtop.telemetry.none_backend",
}

Opener = Callable[[BackendOptions], TelemetryBackend]


def _opener(name: str) -> Opener:
    module = importlib.import_module(_MODULES[name])
    return cast(Opener, module.open_backend)


def open_backend(name: str, options: BackendOptions) -> TelemetryBackend:
    """Open the backend ``name``; ``auto`` tries amdsmi, sysfs, then nvml.

    Raises:
        InputError: unknown backend name.
        BackendUnavailable: an explicitly named backend cannot run here.
        NoGpuFound: ``auto`` found nothing.
    """
    if name not in BACKENDS:
        raise InputError(f"--backend: unknown backend {name!r}; choose one of {', '.join(BACKENDS)}")
    if name != "auto":
        return _opener(name)(options)
    reasons = []
    for candidate in AUTO_ORDER:
        try:
            opener = _opener(candidate)
        except ImportError as exc:  # a backend module missing its dependency must not stop the others
            reasons.append(f"{candidate}: {exc}")
            continue
        try:
            return opener(options)
        except BackendUnavailable as exc:
            text = str(exc)
            reasons.append(text if text.startswith(f"{candidate}:") else f"{candidate}: {text}")
    raise NoGpuFound(
        "no GPU found ("
        + "; ".join(reasons)
        + "); run with --demo for a simulated 8x MI300X node, or --backend none to run without GPU telemetry"
    )
