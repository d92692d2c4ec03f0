"""NVIDIA's Xid and NVSwitch SXid codes as data: the ``[xid_catalog]`` and ``[sxid_catalog]`` tables of
``catalog/nvidia.toml``.

The catalog's ``[[entry]]`` rows find an Xid or SXid line; these tables say what its code means, what amdtop suspects
first, whether it is a cause or a consequence, and what to do (NVIDIA's resolution buckets, spelled out). One table per
code list rather than ~170 regex entries: the line's format is the same for every code, only the code's facts differ.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any

from amdtop.errors import InputError
from amdtop.logread.catalog import CLASSES, _parse_toml

SXID_FAMILIES = ("non_fatal", "fatal", "always_fatal", "notable")


@dataclass(frozen=True, slots=True)
class XidCode:
    """One row of NVIDIA's Xid catalog."""

    code: int
    name: str
    """amdtop's short name (the catalog's description where amdtop had none)."""
    mnemonic: str
    description: str
    """The catalog's description (``Unused``: deprecated on Ampere and newer)."""
    cause: str
    """What amdtop suspects first: a :class:`amdtop.logread.kernel.events.FaultCause` value."""
    cls: str
    """``cause``, ``consequence`` or ``noise``."""
    fix: str
    """The resolution buckets spelled out: the immediate action, then what to investigate if it recurs."""
    immediate: str = ""
    investigatory: str = ""
    channel: bool = False
    """Reported for a channel in error: the ``pid=``/``name=`` on the line is the channel's owner."""
    unused: bool = False


@dataclass(frozen=True, slots=True)
class SxidCode:
    """One NVSwitch SXid of the Fabric Manager user guide."""

    code: int
    name: str
    family: str
    """``non_fatal``, ``fatal`` (potentially), ``always_fatal`` or ``notable``: the guide's section."""
    cls: str
    impact: str
    recovery: str


@dataclass(frozen=True, slots=True)
class NvidiaCodes:
    """Both tables, and where they came from."""

    xid: dict[int, XidCode]
    sxid: dict[int, SxidCode]
    xid_source: str
    sxid_source: str


def _fail(what: str, why: str) -> InputError:
    return InputError(f"catalog/nvidia.toml: {what} {why}; fix the table")


def _str(row: dict[str, Any], key: str, where: str, *, required: bool = True) -> str:
    v = row.get(key, "")
    if not isinstance(v, str) or (required and not v):
        raise _fail(where, f"field {key!r} must be a non-empty string")
    return v


def _xid_fix(row: dict[str, Any], buckets: dict[str, str], where: str) -> str:
    """The immediate bucket's action, then the investigatory one where it adds something, then the row's note."""
    parts: list[str] = []
    for key in ("immediate", "investigatory"):
        bucket = row.get(key)
        if not bucket:
            continue
        if bucket not in buckets:
            raise _fail(where, f"names bucket {bucket!r}, which [xid_catalog.buckets] does not spell out")
        action = buckets[bucket]
        if key == "investigatory":
            if bucket == row.get("immediate") or bucket in ("IGNORE", "INFORMATIONAL"):
                continue
            action = f"if it recurs: {action}"
        parts.append(action)
    if note := row.get("note"):
        parts.append(str(note))
    return "; ".join(parts) or "no resolution is published for it: contact NVIDIA support if it repeats"


def parse_codes(text: str) -> NvidiaCodes:
    """Both tables of ``nvidia.toml``'s text.

    Raises:
        InputError: a row lacks a field, names an unknown class, family or bucket, or repeats a code.
    """
    doc = _parse_toml(text)
    xc, sc = doc.get("xid_catalog"), doc.get("sxid_catalog")
    if not isinstance(xc, dict) or not isinstance(sc, dict):
        raise _fail("[xid_catalog] and [sxid_catalog]", "must both be tables")
    buckets = xc.get("buckets", {})
    xid: dict[int, XidCode] = {}
    for row in xc.get("rows", []):
        code = row.get("code")
        where = f"[xid_catalog] row {code!r}"
        if not isinstance(code, int) or code in xid:
            raise _fail(where, "needs a code (an integer) no other row has")
        if row.get("class") not in CLASSES:
            raise _fail(where, f"field 'class' must be one of {', '.join(CLASSES)}")
        xid[code] = XidCode(
            code=code,
            name=_str(row, "name", where),
            mnemonic=_str(row, "mnemonic", where),
            description=_str(row, "description", where),
            cause=_str(row, "cause", where),
            cls=row["class"],
            fix=_xid_fix(row, buckets, where),
            immediate=_str(row, "immediate", where, required=False),
            investigatory=_str(row, "investigatory", where, required=False),
            channel=bool(row.get("channel", False)),
            unused=bool(row.get("unused", False)),
        )
    families = sc.get("families", {})
    sxid: dict[int, SxidCode] = {}
    for row in sc.get("rows", []):
        code = row.get("code")
        where = f"[sxid_catalog] row {code!r}"
        if not isinstance(code, int) or code in sxid:
            raise _fail(where, "needs a code (an integer) no other row has")
        fam = row.get("family")
        if fam not in SXID_FAMILIES or fam not in families:
            raise _fail(where, f"field 'family' must be one of {', '.join(SXID_FAMILIES)}")
        if row.get("class") not in CLASSES:
            raise _fail(where, f"field 'class' must be one of {', '.join(CLASSES)}")
        sxid[code] = SxidCode(
            code=code,
            name=_str(row, "name", where),
            family=fam,
            cls=row["class"],
            impact=row.get("impact") or families[fam]["impact"],
            recovery=row.get("recovery") or families[fam]["recovery"],
        )
    return NvidiaCodes(xid, sxid, _str(xc, "source", "[xid_catalog]"), _str(sc, "source", "[sxid_catalog]"))


@lru_cache(maxsize=1)
def nvidia_codes() -> NvidiaCodes:
    """The tables shipped in the package (read once per process)."""
    path = resources.files("amdtop.logread") / "catalog" / "nvidia.toml"
    return parse_codes(path.read_text(encoding="utf-8"))
