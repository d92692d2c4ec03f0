"""Linux CPU list strings (``0-31,64-95``) to and from integer tuples."""

from __future__ import annotations

from collections.abc import Iterable


def parse_cpulist(text: str) -> tuple[int, ...]:
    """Parse a kernel cpulist such as ``0-3,8,10-11`` (empty string gives ``()``).

    Raises:
        ValueError: the text is not a cpulist.
    """
    cpus: list[int] = []
    for part in text.strip().split(","):
        part = part.strip()
        if not part:
            continue
        if "-" in part:
            lo, _, hi = part.partition("-")
            stride = 1
            if ":" in hi:  # kernel syntax 0-31:2 (every second CPU)
                hi, _, step = hi.partition(":")
                stride = int(step.split("/")[0])
            cpus.extend(range(int(lo), int(hi) + 1, stride))
        else:
            cpus.append(int(part))
    return tuple(sorted(set(cpus)))


def runs(values: Iterable[int]) -> list[tuple[int, int]]:
    """``values`` as sorted (first, last) runs of consecutive integers: ``(0, 1, 2, 5)`` gives ``[(0, 2), (5, 5)]``."""
    out: list[tuple[int, int]] = []
    for value in sorted(set(values)):
        if out and out[-1][1] + 1 == value:
            out[-1] = (out[-1][0], value)
        else:
            out.append((value, value))
    return out


def format_cpulist(cpus: Iterable[int]) -> str:
    """Format CPUs as a compact cpulist: ``(0, 1, 2, 5)`` gives ``0-2,5``."""
    return ",".join(f"{first}-{last}" if last != first else str(first) for first, last in runs(cpus))
