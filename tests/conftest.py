"""Shared test setup: SVG snapshots live in <repo>/snapshots/<test module>/<test>.svg; e2e tests run serially."""

from __future__ import annotations

from pathlib import Path

import pytest
import pytest_textual_snapshot as pts

SNAPSHOT_ROOT = Path(__file__).resolve().parents[1] / "snapshots"


class TopLevelSVGExtension(pts.SVGImageExtension):
    """Point syrupy's SVG extension at the top-level snapshots folder."""

    @classmethod
    def dirname(cls, *, test_location) -> str:  # type: ignore[no-untyped-def]
        return str(SNAPSHOT_ROOT / Path(test_location.filepath).stem)


pts.SVGImageExtension = TopLevelSVGExtension  # snap_compare looks this name up at call time


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # run-tests runs `-m "not serial and not quiet"` on two xdist workers, then `-m "serial and not quiet"` one at a
    # time, then `-m quiet` alone: real vLLM on the CPU, timing against its own counters, needs the machine to itself.
    e2e = Path(__file__).resolve().parent / "e2e"
    for item in items:
        if e2e in Path(str(item.path)).parents:
            item.add_marker(pytest.mark.e2e)
            # A module that runs no vLLM (a real Prometheus scraping the demo exporter) says QUIET = False: it runs
            # in the parallel step, not in the quiet one.
            if getattr(getattr(item, "module", None), "QUIET", True):
                item.add_marker(pytest.mark.quiet)
    # The other quiet tests (throughput of the simulated server) run before the real-vLLM ones: a vLLM server that a
    # test just stopped can still be winding down its engine processes, and a CI run read a knee of 5 for a capacity
    # of 3 right after them. A stable sort: the order within each group stays as collected.
    items.sort(key=lambda item: item.get_closest_marker("e2e") is not None)
