"""The layers contract places every package of the core: a new package must be given its place (import-linter
checks the imports between the places; this checks that nothing was left out of them)."""

from __future__ import annotations

import re
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[2]


def test_every_amdtop_package_has_a_layer() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    (layers,) = [c for c in config if c["type"] == "layers" and c.get("containers") == ["amdtop"]]
    placed = {name for layer in layers["layers"] for name in re.split(r"[|:]", layer) if name.strip()}
    placed = {name.strip() for name in placed}
    packages = {p.parent.name for p in (ROOT / "amdtop").glob("*/__init__.py")}
    assert len(packages) == 16  # rccl, kernel and incidents moved into logread (issue 48)
    assert packages <= placed, f"packages without a layer: {sorted(packages - placed)}"
