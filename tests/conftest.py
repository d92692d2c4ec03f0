"""Shared test setup: SVG snapshots live in <repo>/snapshots/<test module>/<test>.svg."""

from __future__ import annotations

from pathlib import Path

import pytest_textual_snapshot as pts

SNAPSHOT_ROOT = Path(__file__).resolve().parents[1] / "snapshots"


class TopLevelSVGExtension(pts.SVGImageExtension):
    """Point syrupy's SVG extension at the top-level snapshots folder."""

    @classmethod
    def dirname(cls, *, test_location) -> str:  # type: ignore[no-untyped-def]
        return str(SNAPSHOT_ROOT / Path(test_location.filepath).stem)


pts.SVGImageExtension = TopLevelSVGExtension  # snap_compare looks this name up at call time
