"""The ``/`` filter over the GPU and Workers panes' rows: rows that mention a GPU, a worker or a flag. Pure: no
Textual."""

from __future__ import annotations

import re
from collections.abc import Mapping

_GPU = re.compile(r"^(?:gpu)?(\d+)$", re.IGNORECASE)


def row_text(cells: tuple[object, ...]) -> str:
    return " ".join(str(c) for c in cells).lower()


def matches(key: str, cells: tuple[object, ...], term: str, extra: str = "") -> bool:
    """True when every word of ``term`` is in the row (``gpu3``/``3`` names GPU 3's row and the rows using GPU 3).

    ``extra`` is text the row stands for without showing it (a worker's flags).
    """
    text = f"{row_text(cells)} {extra.lower()}"
    for word in term.lower().split():
        gpu = _GPU.match(word)
        if gpu is not None:
            index = gpu.group(1)
            if key == f"gpu-{index}":
                continue
            if key.startswith("w-") and index in re.split(r"[ ,]+", str(cells[2]) if len(cells) > 2 else ""):
                continue
            return False
        if word not in text:
            return False
    return True


def filter_rows(
    rows: Mapping[str, tuple[object, ...]], term: str, extra: Mapping[str, str] | None = None
) -> dict[str, tuple[object, ...]]:
    if not term.strip():
        return dict(rows)
    extra = extra or {}
    return {k: cells for k, cells in rows.items() if matches(k, cells, term, extra.get(k, ""))}
