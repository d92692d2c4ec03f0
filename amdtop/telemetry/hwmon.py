"""Which amdgpu hwmon files hold which metric (amd.md §2).

Labels pick the files: ``temp*_label`` ``junction``/``edge``/``mem``, ``freq*_label`` ``sclk``/``mclk``. Power follows
rocm_smi: ``power1_input`` when ``power1_label`` is ``PPT`` (MI300X hides ``power1_average``), else ``power1_average``;
when the preferred file is absent the other one is used.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from amdtop.sysread import read_text_or_none

_LABEL = re.compile(r"(temp|freq)(\d+)_label$")


@dataclass(frozen=True, slots=True)
class HwmonFiles:
    """Paths (as strings, ready for ``os.open``) of one GPU's hwmon metrics; ``None`` where absent."""

    temp: str | None = None
    """Hottest meaningful temperature: junction, else edge (m°C)."""
    mem_temp: str | None = None
    """HBM temperature (m°C)."""
    power: str | None = None
    """Socket power (µW)."""
    power_cap: str | None = None
    """Power cap (µW)."""
    sclk: str | None = None
    """Graphics clock (Hz)."""
    mclk: str | None = None
    """Memory clock (Hz)."""


def _read(path: Path) -> str | None:
    return read_text_or_none(path)


def _existing(path: Path) -> str | None:
    return str(path) if path.is_file() else None


def find_hwmon(device_dir: Path) -> HwmonFiles:
    """Locate the metric files of the GPU whose PCI device directory is ``device_dir``."""
    try:
        dirs = sorted(os.listdir(device_dir / "hwmon"))
    except OSError:
        return HwmonFiles()
    if not dirs:
        return HwmonFiles()
    hw = device_dir / "hwmon" / dirs[0]
    try:
        names = os.listdir(hw)
    except OSError:
        return HwmonFiles()
    labels: dict[str, str] = {}
    for name in names:
        m = _LABEL.match(name)
        if m:
            label = _read(hw / name)
            if label is not None:
                labels.setdefault(label.lower(), f"{m.group(1)}{m.group(2)}_input")
    temp = labels.get("junction") or labels.get("edge")
    power_label = _read(hw / "power1_label")
    order = ("power1_input", "power1_average") if power_label == "PPT" else ("power1_average", "power1_input")
    power = next((p for p in (_existing(hw / o) for o in order) if p), None)
    return HwmonFiles(
        temp=_existing(hw / temp) if temp else None,
        mem_temp=_existing(hw / labels["mem"]) if "mem" in labels else None,
        power=power,
        power_cap=_existing(hw / "power1_cap"),
        sclk=_existing(hw / labels["sclk"]) if "sclk" in labels else None,
        mclk=_existing(hw / labels["mclk"]) if "mclk" in labels else None,
    )
