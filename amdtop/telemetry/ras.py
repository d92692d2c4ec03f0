"""RAS error counters of an amdgpu device: ``device/ras/<block>_err_count`` (``ue: N`` / ``ce: N`` / ``de: N``).

The driver creates one file per RAS-capable block (``umc``, ``gfx``, ``sdma``, ``mmhub``, ``xgmi_wafl``...) only when
RAS is enabled, so a GPU without the directory has no ECC counts (``None``), not zero errors.
"""

from __future__ import annotations

import os

from amdtop.model import EccCount
from amdtop.sysread import decode

_SUFFIX = "_err_count"
_KEYS = {"ce": "correctable", "ue": "uncorrectable", "de": "deferred"}


def find_ras_files(device_dir: str) -> tuple[tuple[str, str], ...]:
    """(block, path) of every ``*_err_count`` file under ``device_dir/ras``, sorted by block."""
    ras = os.path.join(device_dir, "ras")
    try:
        names = os.listdir(ras)
    except OSError:
        return ()
    return tuple(sorted((n[: -len(_SUFFIX)], os.path.join(ras, n)) for n in names if n.endswith(_SUFFIX)))


def parse_err_count(text: str) -> dict[str, int]:
    """``{"correctable": .., "uncorrectable": .., "deferred": ..}`` from one file (keys absent when not there)."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        name = _KEYS.get(key.strip())
        if name is None:
            continue
        try:
            out[name] = int(value.strip())
        except ValueError:
            continue
    return out


def read_ras(files: tuple[tuple[str, str], ...]) -> tuple[EccCount, ...] | None:
    """Read each block's counts; ``None`` when no file could be read."""
    out: list[EccCount] = []
    for block, path in files:
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            continue
        try:
            text = decode(os.read(fd, 256))
        except OSError:
            continue
        finally:
            os.close(fd)
        counts = parse_err_count(text)
        if counts:
            out.append(EccCount(block, counts.get("correctable"), counts.get("uncorrectable"), counts.get("deferred")))
    return tuple(out) if out else None
