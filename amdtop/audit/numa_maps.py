"""Where a process's memory really is: ``/proc/PID/numa_maps`` summed per NUMA node (in KiB, page sizes weighed)."""

from __future__ import annotations

import re

_NODE = re.compile(rb"\bN(\d+)=(\d+)")
_PAGE = re.compile(rb"\bkernelpagesize_kB=(\d+)")


class NumaMapsError(ValueError):
    """The text is not numa_maps."""


def node_kib(raw: bytes) -> dict[int, int]:
    """KiB resident per node in one ``numa_maps`` text; NumaMapsError when no line has the format."""
    if _PAGE.search(raw) is not None and set(_PAGE.findall(raw)) == {b"4"}:
        # Every mapping in 4 KiB pages (no hugepages): one pass over the whole text, no per-line work.
        head = raw.split(b" ", 1)[0]
        try:
            int(head, 16)
        except ValueError:
            raise NumaMapsError("no 'ADDRESS policy ...' line") from None
        out: dict[int, int] = {}
        for node, pages in _NODE.findall(raw):
            out[int(node)] = out.get(int(node), 0) + int(pages) * 4
        return out
    return _node_kib_lines(raw)


def _node_kib_lines(raw: bytes) -> dict[int, int]:
    out: dict[int, int] = {}
    good = 0
    for line in raw.splitlines():
        if not line:
            continue
        head = line.split(b" ", 1)[0]
        try:
            int(head, 16)
        except ValueError:
            continue
        good += 1
        page = _PAGE.search(line)
        kib = int(page.group(1)) if page else 4
        for node, pages in _NODE.findall(line):
            out[int(node)] = out.get(int(node), 0) + int(pages) * kib
    if raw.strip() and not good:
        raise NumaMapsError("no 'ADDRESS policy ...' line")
    return out


def local_pct(per_node: dict[int, int], nodes: set[int]) -> float | None:
    """Share of the pages on ``nodes``, percent (``None`` when nothing is resident)."""
    total = sum(per_node.values())
    if total <= 0:
        return None
    return 100.0 * sum(v for n, v in per_node.items() if n in nodes) / total
