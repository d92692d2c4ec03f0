"""The message catalog: entries read from ``catalog/<family>.toml`` (data, one file per emitter family).

Each entry names one line an emitter prints (its source: repo, version, file and format string), the regex that finds
it, its class (``cause`` opens an incident, ``consequence`` joins one, ``noise`` is known and ignored), its scope and
the incident kind. The format is /work/wt/CATALOG.md's (issue 48); a malformed entry is refused with one line naming
the file, the entry and the field.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any

from amdtop.errors import InputError

FAMILIES = ("nccl", "runtime", "pytorch", "serving", "ray", "amdgpu", "nvidia")
"""Catalog files in the order their entries are tried: a line is claimed by the first entry that matches it. PyTorch,
vLLM and Ray quote NCCL's and the runtimes' error strings inside their own lines (``watchdog thread terminated with
exception: CUDA error: ...``), so the quoted emitter's entry, which names the cause, comes first."""
CLASSES = ("cause", "consequence", "noise")
SCOPES = ("rank", "device", "host", "peer", "nic_port", "process", "node")
SEVERITIES = ("error", "warning", "info")
_REQUIRED = ("id", "emitter", "source", "pattern", "class", "scope", "kind", "meaning", "fix")


@dataclass(frozen=True, slots=True)
class Entry:
    """One catalog entry (see the module docstring and CATALOG.md)."""

    id: str
    """``family.area.name``, unique over the catalog."""
    family: str
    """The catalog file it came from (``nccl``)."""
    emitter: str
    """The program that prints the line (``NCCL``, ``RCCL``, ``PyTorch``, ``HIP``...)."""
    source: str
    """Repo, version, file and format string of the line (or ``not found: ...``)."""
    pattern: re.Pattern[str]
    """Searched in the line's text after its known prefixes are stripped; named groups are the line's fields."""
    cls: str
    """``cause``, ``consequence`` or ``noise``."""
    scope: str
    """What the line names: one of :data:`SCOPES`."""
    kind: str
    """The incident kind a cause opens or a consequence joins."""
    meaning: str
    """What the line means, in a sentence."""
    fix: str
    """What to do about it."""
    title: str
    """A short name of what happened (``HIP memory access fault``): the head of an incident's summary."""
    severity: str = "error"
    anchors: tuple[str, ...] | None = None
    """Literals of which every matching line holds one: a cheap ``in`` test before the regex (``None``: always try
    the regex). Given as ``anchor`` in the entry, else derived from the pattern (:func:`derive_anchors`)."""
    examples: tuple[str, ...] = ()
    """Lines the pattern must match (built from the format string or quoted from a capture): checked by the tests."""
    say: str | None = None
    """How a person would say one line of it, from its fields: ``{field}`` is replaced, and a ``[...]`` part whose
    fields the line did not give is left out (``tried to allocate {what}[ on GPU {device}]``)."""
    continuation: re.Pattern[str] | None = None
    """Lines the emitter prints right after this one as part of the same message (Ray's ``\tpid: 20174`` under an
    ActorDiedError): matched against the raw lines that follow, their named groups add fields, the first line that
    does not match ends it."""
    ends_communicator: bool = False
    """An NCCL/RCCL WARN after which the communicator cannot work, whether or not a return-code trail follows it (an
    IPC handle, a reverse path, a proxy call, a GPU runtime call): the job-log reader makes it an error by itself."""


def _fail(where: str, field: str, why: str) -> InputError:
    return InputError(f"{where}: field {field!r} {why}; fix the catalog entry")


def _structure(pattern: str, i: int = 0) -> Iterator[tuple[int, str]]:
    """``(index, char)`` of ``pattern``'s characters from ``i`` that shape it: escapes (``\\x``) and character
    classes (``[...]``) are stepped over whole, so a ``|`` or ``(`` inside them is not seen."""
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            i += 2
            continue
        if c == "[":
            j = i + 1
            while j < len(pattern) and pattern[j] != "]":
                j += 2 if pattern[j] == "\\" else 1
            i = j + 1
            continue
        yield i, c
        i += 1


def _split_top(pattern: str) -> list[str]:
    """``pattern`` cut at its top-level ``|`` (not inside a group or a class)."""
    out, depth, start = [], 0, 0
    for i, c in _structure(pattern):
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
        elif c == "|" and depth == 0:
            out.append(pattern[start:i])
            start = i + 1
    out.append(pattern[start:])
    return out


def _group_end(pattern: str, i: int) -> int:
    """Index of the ``)`` closing the group opened at ``pattern[i]``."""
    depth = 0
    for j, c in _structure(pattern, i):
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                return j
    return -1


def _longest_run(pattern: str) -> str:
    """The longest literal run outside groups and classes that every match holds."""
    depth = 0
    runs: list[str] = []
    cur: list[str] = []
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if c == "\\" and i + 1 < len(pattern):
            nxt = pattern[i + 1]
            if depth == 0 and not nxt.isalnum():
                cur.append(nxt)  # an escaped literal (``\.``, ``\(``, ``\ ``)
            else:
                runs.append("".join(cur))
                cur = []
            i += 2
            continue
        if c in "?*{":
            if cur:
                cur.pop()  # the char before an optional quantifier may be absent
            runs.append("".join(cur))
            cur = []
            if c == "{":
                j = pattern.find("}", i)
                i = j + 1 if j > 0 else i + 1
                continue
        elif c == "+":
            runs.append("".join(cur))  # the char before it is there at least once: keep it, cut after
            cur = []
        elif c == "(":
            runs.append("".join(cur))
            cur = []
            depth += 1
        elif c == ")":
            runs.append("".join(cur))
            cur = []
            depth -= 1
        elif c == "[":
            runs.append("".join(cur))
            cur = []
            j = i + 1
            while j < len(pattern) and pattern[j] != "]":
                j += 2 if pattern[j] == "\\" else 1
            i = j + 1
            continue
        elif c in ".^$":
            runs.append("".join(cur))
            cur = []
        elif depth == 0:
            cur.append(c)
        i += 1
    runs.append("".join(cur))
    return max(runs, key=len)


def derive_anchors(pattern: str) -> tuple[str, ...] | None:
    """Literals of which every match of ``pattern`` holds at least one (one per top-level alternative, or of the
    group the pattern opens with), or ``None`` where that is not plain to see. Used only to skip the regex on lines
    that cannot match, never to accept one."""
    alternatives = _split_top(pattern)
    if len(alternatives) > 1:
        out: list[str] = []
        for alt in alternatives:
            got = derive_anchors(alt)
            if got is None:
                return None
            out += got
        return tuple(dict.fromkeys(out))
    best = _longest_run(pattern)
    if len(best) >= 4:
        return (best,)
    if pattern.startswith("("):
        end = _group_end(pattern, 0)
        if end > 0 and pattern[end + 1 : end + 2] not in ("?", "*", "{"):
            inner = pattern[1:end]
            if inner.startswith("?:"):
                inner = inner[2:]
            elif inner.startswith("?P<"):
                inner = inner[inner.index(">") + 1 :]
            elif inner.startswith("?"):
                return None
            return derive_anchors(inner)
    return None


def derive_anchor(pattern: str) -> str | None:
    """The one literal every match holds (see :func:`derive_anchors`), ``None`` where there is not one."""
    got = derive_anchors(pattern)
    return got[0] if got is not None and len(got) == 1 else None


def _entry(family: str, raw: dict[str, Any], n: int) -> Entry:
    where = f"catalog/{family}.toml entry {n} ({raw.get('id', 'no id')})"
    for key in _REQUIRED:
        if not isinstance(raw.get(key), str) or not raw[key].strip():
            raise _fail(where, key, "is missing or not a non-empty string")
    if raw["class"] not in CLASSES:
        raise _fail(where, "class", f"is {raw['class']!r}, not one of {', '.join(CLASSES)}")
    if raw["scope"] not in SCOPES:
        raise _fail(where, "scope", f"is {raw['scope']!r}, not one of {', '.join(SCOPES)}")
    severity = raw.get("severity", "error")
    if severity not in SEVERITIES:
        raise _fail(where, "severity", f"is {severity!r}, not one of {', '.join(SEVERITIES)}")
    if not raw["id"].startswith(family + "."):
        raise _fail(where, "id", f"must start with {family + '.'!r}")
    try:
        pattern = re.compile(raw["pattern"])
    except re.error as exc:
        raise _fail(where, "pattern", f"is not a valid regex ({exc})") from None
    examples = raw.get("examples", [])
    if not isinstance(examples, list) or not all(isinstance(e, str) for e in examples):
        raise _fail(where, "examples", "must be a list of strings")
    anchor = raw.get("anchor")
    if anchor is not None and not isinstance(anchor, str):
        raise _fail(where, "anchor", "must be a string")
    anchors = (anchor,) if anchor else derive_anchors(raw["pattern"])
    title = raw.get("title") or raw["meaning"].split(":")[0].split(".")[0]
    continuation = None
    if raw.get("continuation") is not None:
        if not isinstance(raw["continuation"], str):
            raise _fail(where, "continuation", "must be a string (a regex)")
        try:
            continuation = re.compile(raw["continuation"])
        except re.error as exc:
            raise _fail(where, "continuation", f"is not a valid regex ({exc})") from None
    ends = raw.get("ends_communicator", False)
    if not isinstance(ends, bool):
        raise _fail(where, "ends_communicator", "must be true or false")
    return Entry(
        id=raw["id"],
        family=family,
        emitter=raw["emitter"],
        source=raw["source"],
        pattern=pattern,
        cls=raw["class"],
        scope=raw["scope"],
        kind=raw["kind"],
        meaning=raw["meaning"],
        fix=raw["fix"],
        title=str(title),
        severity=severity,
        anchors=anchors,
        examples=tuple(examples),
        continuation=continuation,
        say=raw["say"] if isinstance(raw.get("say"), str) else None,
        ends_communicator=ends,
    )


def _parse_toml(text: str) -> dict[str, Any]:
    if sys.version_info >= (3, 11):
        import tomllib

        return tomllib.loads(text)
    import tomlkit  # Python 3.10 has no tomllib; tomlkit is a declared dependency

    return tomlkit.parse(text).unwrap()


def parse_family(family: str, text: str) -> tuple[Entry, ...]:
    """The entries of one catalog file's text.

    Raises:
        InputError: the TOML is invalid or an entry lacks a field (the message names the file, entry and field).
    """
    try:
        doc = _parse_toml(text)
    except ValueError as exc:  # tomllib.TOMLDecodeError and tomlkit's errors are ValueErrors
        raise InputError(f"catalog/{family}.toml: not valid TOML ({exc}); fix the file") from None
    raw = doc.get("entry", [])
    if not isinstance(raw, list):
        raise InputError(f"catalog/{family}.toml: 'entry' must be an array of tables ([[entry]]); fix the file")
    return tuple(_entry(family, e, n) for n, e in enumerate(raw, 1))


@dataclass(frozen=True, slots=True)
class Catalog:
    """Every entry, in the order they are tried."""

    entries: tuple[Entry, ...]

    def by_id(self, entry_id: str) -> Entry:
        """The entry named ``entry_id`` (KeyError where none)."""
        for e in self.entries:
            if e.id == entry_id:
                return e
        raise KeyError(entry_id)

    def family(self, name: str) -> tuple[Entry, ...]:
        """The entries of one family, in file order."""
        return tuple(e for e in self.entries if e.family == name)

    def only(self, families: tuple[str, ...]) -> Catalog:
        """The entries of ``families`` alone, in catalog order."""
        return Catalog(tuple(e for e in self.entries if e.family in families))

    def without(self, families: tuple[str, ...]) -> Catalog:
        """Every entry but those of ``families``, in catalog order."""
        return Catalog(tuple(e for e in self.entries if e.family not in families))


@lru_cache(maxsize=1)
def load_catalog() -> Catalog:
    """The catalog shipped in the package (read once per process). A family whose file is absent is skipped.

    Raises:
        InputError: a catalog file is malformed, or two entries share an id.
    """
    base = resources.files("amdtop.logread") / "catalog"
    entries: list[Entry] = []
    for family in FAMILIES:
        path = base / f"{family}.toml"
        if not path.is_file():
            continue
        entries += parse_family(family, path.read_text(encoding="utf-8"))
    seen: set[str] = set()
    for e in entries:
        if e.id in seen:
            raise InputError(f"catalog/{e.family}.toml: id {e.id!r} is used twice; give each entry its own id")
        seen.add(e.id)
    return Catalog(tuple(entries))
