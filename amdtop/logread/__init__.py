"""How amdtop reads a log: one catalog of the lines known programs print, one reader for any source, one incident
builder (issue 48).

- ``catalog/<family>.toml``: the message catalog, data (format: CATALOG.md of issue 48). Families: pytorch, nccl,
  runtime (ROCr/HIP, CUDA runtime), serving (vLLM, SGLang), ray, amdgpu, nvidia. Every entry cites its emitter's
  source; :func:`load_catalog` reads them all once (a malformed entry is refused with one line naming the field).
- :func:`read_head`: the known prefixes of a line (timestamps, Ray/vLLM/PyTorch/NCCL/kernel/syslog heads) and what
  they name (time, host, pid, rank, local device).
- :class:`Reader`: ``feed(line, file, lineno)`` from any source (``logs parse``, a worker's log tail, the kernel log);
  keeps :class:`Sighting` s bounded by what will be reported (a repeated line is a count, not a list).
- :func:`build`: sightings -> incidents (first cause opens, consequences join, scope from the lines, no claim that
  no line makes). :func:`read_lines` does all three for a list of lines.

The small API (for the kernel families and every caller)::

    reader = Reader()                      # every family of the shipped catalog
    for n, line in enumerate(lines, 1):
        reader.feed(line, "dmesg", n)
    incidents = [b.incident for b in build(reader.sightings())]
"""

from __future__ import annotations

from collections.abc import Collection, Iterable

from amdtop.logread.build import DEPTH, WINDOW_S, Built, build, merge
from amdtop.logread.catalog import FAMILIES, Catalog, Entry, load_catalog, parse_family
from amdtop.logread.incidents.model import Incident
from amdtop.logread.match import Match, Matcher
from amdtop.logread.prefix import Head, read_head
from amdtop.logread.reader import MAX_SIGHTINGS, Reader, Sighting

__all__ = [
    "DEPTH",
    "FAMILIES",
    "MAX_SIGHTINGS",
    "WINDOW_S",
    "Built",
    "Catalog",
    "Entry",
    "Head",
    "Match",
    "Matcher",
    "Reader",
    "Sighting",
    "build",
    "load_catalog",
    "merge",
    "parse_family",
    "read_head",
    "read_lines",
]


def read_lines(
    lines: Iterable[str], file: str = "<memory>", owned_elsewhere: Collection[str] = ()
) -> tuple[Incident, ...]:
    """Every incident the catalog finds in ``lines`` (one source), in the order they began."""
    reader = Reader()
    reader.feed_lines(lines, file)
    return tuple(b.incident for b in build(reader.sightings(), owned_elsewhere))
