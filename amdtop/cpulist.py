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


def format_cpulist(cpus: Iterable[int]) -> str:
    """Format CPUs as a compact cpulist: ``(0, 1, 2, 5)`` gives ``0-2,5``."""
    ordered = sorted(set(cpus))
    if not ordered:
        return ""
    parts: list[str] = []
    start = prev = ordered[0]
    for cpu in ordered[1:]:
        if cpu == prev + 1:
            prev = cpu
            continue
        parts.append(f"{start}-{prev}" if prev != start else str(start))
        start = prev = cpu
    parts.append(f"{start}-{prev}" if prev != start else str(start))
    return ",".join(parts)
