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
    start: int = 0
    """Where the match begins in the message: what comes before it (a ``[PG 0 Rank 1]`` quoted by a C++ ``what():``)
    may still name the rank."""

    def field(self, name: str) -> str | None:
        """The value of field ``name``, ``None`` where the line did not give it. A pattern whose alternatives name
        the same field twice spells the later ones ``name2``, ``name3`` (a regex may not repeat a group name)."""
        for k, v in self.fields:
            if k == name or (k.startswith(name) and k[len(name) :].isdigit()):
                return v
        return None


MAX_SEEN = 4096
"""Distinct messages whose match is remembered (cleared when full: bounded memory)."""


def trie_regex(words: list[str]) -> str:
    """One regex finding any of ``words``, shaped as a trie (common prefixes shared), so the engine tries one branch
    per character instead of every word at every position; a word that another extends ends the branch there (a
    pre-filter needs only the shorter one)."""
    trie: dict[str, dict] = {}  # type: ignore[type-arg]
    for w in words:
        node = trie
        for ch in w:
            node = node.setdefault(ch, {})
        node[""] = {}

    def build(node: dict) -> str:  # type: ignore[type-arg]
        if "" in node:
            return ""
        alts = [re.escape(ch) + build(node[ch]) for ch in sorted(node)]
        return alts[0] if len(alts) == 1 else "(?:" + "|".join(alts) + ")"

    return build(trie)


class Matcher:
    """Match message texts (prefixes already stripped) against a catalog."""

    def __init__(self, catalog: Catalog) -> None:
        self.entries = catalog.entries
        anchors = sorted({a for e in self.entries for a in e.anchors or ()})
        self._always = any(e.anchors is None for e in self.entries)
        trie = trie_regex(anchors) if anchors else None
        self._pre = re.compile(trie) if trie else None
        # (anchor, entry index) flat: a line's candidate entries in one pass of C substring tests
        self._pairs = tuple((a, n) for n, e in enumerate(self.entries) for a in e.anchors or ())
        self._free = frozenset(n for n, e in enumerate(self.entries) if e.anchors is None)
        self._seen: dict[str, Match | None] = {}
        """Messages already matched: logs repeat their lines (every rank, every retry), the answer is the same."""

    def may_match(self, line: str) -> bool:
        """False only where no entry can match ``line`` (or any text inside it): one C search, no regex per entry."""
        return self._always or (self._pre is not None and self._pre.search(line) is not None)

    def match(self, text: str, checked: bool = False) -> Match | None:
        """The first entry whose pattern is found in ``text``, with its fields; ``None`` for an unknown line.
        ``checked``: the caller already ran :meth:`may_match` on a text holding this one."""
        if not checked and not self.may_match(text):
            return None
        if text in self._seen:
            return self._seen[text]
        if len(self._seen) >= MAX_SEEN:
            self._seen.clear()
        found = self._seen[text] = self._match(text)
        return found

    def _match(self, text: str) -> Match | None:
        hits = {n for a, n in self._pairs if a in text}
        hits.update(self._free)
        for n in sorted(hits):
            e = self.entries[n]
            m = e.pattern.search(text)
            if m:
                return Match(e, tuple((k, v) for k, v in m.groupdict().items() if v is not None), m.start())
        return None
