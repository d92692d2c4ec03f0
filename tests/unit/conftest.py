"""Fixtures shared by the unit tests."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from amdtop.telemetry.amdsmi_backend import load_amdsmi

FAKES = Path(__file__).resolve().parents[1] / "fakes"
"""The fake ``amdsmi`` 7.0.2 package (tests/fakes/amdsmi)."""


@pytest.fixture
def smi(monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    """The fake ``amdsmi``, imported through amdtop's guarded loader (and unloaded after the test)."""
    for name in [m for m in sys.modules if m == "amdsmi" or m.startswith("amdsmi.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.syspath_prepend(str(FAKES))
    module = load_amdsmi()
    assert module.__file__ and module.__file__.startswith(str(FAKES))
    yield module
    module.amdsmi_interface._FAKE_FAIL.clear()
    for name in [m for m in sys.modules if m == "amdsmi" or m.startswith("amdsmi.")]:
        del sys.modules[name]
