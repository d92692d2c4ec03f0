"""The matcher: which catalog entry a line is, and the fields it names.

One literal pre-filter (every entry's anchor in one alternation, searched in C) keeps lines no entry can match away
from the regexes; a line that passes is tried entry by entry in catalog order, the first match wins.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from amdtop.logread.catalog import Catalog, Entry


@dataclass(frozen=True, slots=True)
class Match:
    """A line that is a catalog entry."""

    entry: Entry
    fields: tuple[tuple[str, str], ...]
    """The named groups that matched (``peer``, ``node``, ``address``...), in pattern order."""

    def field(self, name: str) -> str | None:
        """The value of field ``name``, ``None`` where the line did not give it. A pattern whose alternatives name
        the same field twice spells the later ones ``name2``, ``name3`` (a regex may not repeat a group name)."""
        for k, v in self.fields:
            if k == name or (k.startswith(name) and k[len(name) :].isdigit()):
                return v
        return None


class Matcher:
    """Match message texts (prefixes already stripped) against a catalog."""

    def __init__(self, catalog: Catalog) -> None:
        self.entries = catalog.entries
        anchors = sorted({a for e in self.entries for a in e.anchors or ()}, key=len, reverse=True)
        self._always = any(e.anchors is None for e in self.entries)
        self._pre = re.compile("|".join(re.escape(a) for a in anchors)) if anchors else None

    def may_match(self, line: str) -> bool:
        """False only where no entry can match ``line`` (or any text inside it): one C search, no regex per entry."""
        return self._always or (self._pre is not None and self._pre.search(line) is not None)

    def match(self, text: str) -> Match | None:
        """The first entry whose pattern is found in ``text``, with its fields; ``None`` for an unknown line."""
        if not self.may_match(text):
            return None
        for e in self.entries:
            if e.anchors is not None and not any(a in text for a in e.anchors):
                continue
            m = e.pattern.search(text)
            if m:
                return Match(e, tuple((k, v) for k, v in m.groupdict().items() if v is not None))
        return None
