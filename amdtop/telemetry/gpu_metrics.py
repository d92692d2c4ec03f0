"""The amdgpu ``gpu_metrics`` sysfs file: a binary table the power firmware fills, read by its header.

The file starts with ``metrics_table_header`` (``structure_size`` u16, ``format_revision`` u8, ``content_revision``
u8); the rest is one of the ``gpu_metrics_vX_Y`` structs of the Linux kernel's
``drivers/gpu/drm/amd/include/kgd_pp_interface.h``. The layouts below are written from those field names and C
types, laid out with C's natural alignment (the kernel structs are not packed):

* v1.3: MI200 (aldebaran); ``indep_throttle_status`` is the ASIC-independent throttler bit set.
* v1.4 / v1.5: MI300 (smu 13.0.6) on 6.7-6.9 era kernels; ``xgmi_read_data_acc``/``xgmi_write_data_acc`` per link.
* v1.6: MI300 on later kernels; adds ``accumulation_counter`` and the throttler residency counters.

Anything else (another revision, a short file, a size that disagrees with the revision) parses to ``None``: those
metrics are then absent rather than read from the wrong offsets. Fields the firmware does not fill are all ones
(the driver presets the table with 0xff), and come back as ``None``.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from amdtop.model import XgmiLinkCounters

NUM_HBM_INSTANCES = 4
NUM_XGMI_LINKS = 8
MAX_GFX_CLKS = 8
MAX_CLKS = 4
NUM_VCN = 4
NUM_JPEG_ENG = 32

_HEADER = struct.Struct("<HBB")

# (field, struct code, count): "H" u16, "I" u32, "Q" u64.
_Field = tuple[str, str, int]

_V1_3: tuple[_Field, ...] = (
    ("temperature_edge", "H", 1),
    ("temperature_hotspot", "H", 1),
    ("temperature_mem", "H", 1),
    ("temperature_vrgfx", "H", 1),
    ("temperature_vrsoc", "H", 1),
    ("temperature_vrmem", "H", 1),
    ("average_gfx_activity", "H", 1),
    ("average_umc_activity", "H", 1),
    ("average_mm_activity", "H", 1),
    ("average_socket_power", "H", 1),
    ("energy_accumulator", "Q", 1),
    ("system_clock_counter", "Q", 1),
    ("average_gfxclk_frequency", "H", 1),
    ("average_socclk_frequency", "H", 1),
    ("average_uclk_frequency", "H", 1),
    ("average_vclk0_frequency", "H", 1),
    ("average_dclk0_frequency", "H", 1),
    ("average_vclk1_frequency", "H", 1),
    ("average_dclk1_frequency", "H", 1),
    ("current_gfxclk", "H", 1),
    ("current_socclk", "H", 1),
    ("current_uclk", "H", 1),
    ("current_vclk0", "H", 1),
    ("current_dclk0", "H", 1),
    ("current_vclk1", "H", 1),
    ("current_dclk1", "H", 1),
    ("throttle_status", "I", 1),
    ("current_fan_speed", "H", 1),
    ("pcie_link_width", "H", 1),
    ("pcie_link_speed", "H", 1),
    ("padding", "H", 1),
    ("gfx_activity_acc", "I", 1),
    ("mem_activity_acc", "I", 1),
    ("temperature_hbm", "H", NUM_HBM_INSTANCES),
    ("firmware_timestamp", "Q", 1),
    ("voltage_soc", "H", 1),
    ("voltage_gfx", "H", 1),
    ("voltage_mem", "H", 1),
    ("padding1", "H", 1),
    ("indep_throttle_status", "Q", 1),
)

_MI300_HEAD: tuple[_Field, ...] = (
    ("temperature_hotspot", "H", 1),
    ("temperature_mem", "H", 1),
    ("temperature_vrsoc", "H", 1),
    ("curr_socket_power", "H", 1),
    ("average_gfx_activity", "H", 1),
    ("average_umc_activity", "H", 1),
    ("vcn_activity", "H", NUM_VCN),
)
_JPEG: tuple[_Field, ...] = (("jpeg_activity", "H", NUM_JPEG_ENG),)
_ENERGY: tuple[_Field, ...] = (("energy_accumulator", "Q", 1), ("system_clock_counter", "Q", 1))
_RESIDENCY: tuple[_Field, ...] = (
    ("accumulation_counter", "I", 1),
    ("prochot_residency_acc", "I", 1),
    ("ppt_residency_acc", "I", 1),
    ("socket_thm_residency_acc", "I", 1),
    ("vr_thm_residency_acc", "I", 1),
    ("hbm_thm_residency_acc", "I", 1),
)
_MI300_LINKS: tuple[_Field, ...] = (
    ("throttle_status", "I", 1),
    ("gfxclk_lock_status", "I", 1),
    ("pcie_link_width", "H", 1),
    ("pcie_link_speed", "H", 1),
    ("xgmi_link_width", "H", 1),
    ("xgmi_link_speed", "H", 1),
    ("gfx_activity_acc", "I", 1),
    ("mem_activity_acc", "I", 1),
    ("pcie_bandwidth_acc", "Q", 1),
    ("pcie_bandwidth_inst", "Q", 1),
    ("pcie_l0_to_recov_count_acc", "Q", 1),
    ("pcie_replay_count_acc", "Q", 1),
    ("pcie_replay_rover_count_acc", "Q", 1),
)
_NAK: tuple[_Field, ...] = (("pcie_nak_sent_count_acc", "I", 1), ("pcie_nak_rcvd_count_acc", "I", 1))
_MI300_TAIL: tuple[_Field, ...] = (
    ("xgmi_read_data_acc", "Q", NUM_XGMI_LINKS),
    ("xgmi_write_data_acc", "Q", NUM_XGMI_LINKS),
    ("firmware_timestamp", "Q", 1),
    ("current_gfxclk", "H", MAX_GFX_CLKS),
    ("current_socclk", "H", MAX_CLKS),
    ("current_vclk0", "H", MAX_CLKS),
    ("current_dclk0", "H", MAX_CLKS),
    ("current_uclk", "H", 1),
    ("padding", "H", 1),
)

FIELDS: dict[tuple[int, int], tuple[_Field, ...]] = {
    (1, 3): _V1_3,
    (1, 4): _MI300_HEAD + _ENERGY + _MI300_LINKS + _MI300_TAIL,
    (1, 5): _MI300_HEAD + _JPEG + _ENERGY + _MI300_LINKS + _NAK + _MI300_TAIL,
    (1, 6): _MI300_HEAD + _JPEG + _ENERGY + _RESIDENCY + _MI300_LINKS + _NAK + _MI300_TAIL,
}

_SIZES = {"H": 2, "I": 4, "Q": 8}


@dataclass(frozen=True, slots=True)
class Layout:
    """One revision's struct: the ``struct`` format (header included) and where each field's values sit."""

    format: struct.Struct
    slots: dict[str, tuple[int, int]]
    """field -> (first index in the unpacked tuple, count)."""
    codes: dict[str, str]

    @property
    def size(self) -> int:
        """``structure_size`` the header must carry."""
        return self.format.size


def _layout(fields: Sequence[_Field]) -> Layout:
    fmt = ["HBB"]
    offset = _HEADER.size
    slots: dict[str, tuple[int, int]] = {}
    codes: dict[str, str] = {}
    index = 3
    for name, code, count in fields:
        size = _SIZES[code]
        pad = -offset % size  # natural alignment, as the C compiler lays the struct out
        if pad:
            fmt.append(f"{pad}x")
            offset += pad
        fmt.append(f"{count}{code}")
        slots[name] = (index, count)
        codes[name] = code
        index += count
        offset += size * count
    tail = -offset % 8  # the struct holds u64s, so its size is a multiple of 8
    if tail:
        fmt.append(f"{tail}x")
    return Layout(struct.Struct("<" + "".join(fmt)), slots, codes)


LAYOUTS: dict[tuple[int, int], Layout] = {rev: _layout(fields) for rev, fields in FIELDS.items()}

_ALL_ONES = {"H": 0xFFFF, "I": 0xFFFF_FFFF, "Q": 0xFFFF_FFFF_FFFF_FFFF}

# ASIC-independent throttler bits (``indep_throttle_status``; SMU_THROTTLER_*_BIT in the kernel's amdgpu_smu.h),
# grouped into the reasons amdtop shows.
INDEP_THROTTLE_BITS: dict[int, str] = {
    **{bit: "power_cap" for bit in range(0, 8)},  # PPT0-3, SPL, FPPT, SPPT, SPPT_APU
    **{bit: "current" for bit in range(16, 24)},  # TDC_*, EDC_*, APCC
    32: "thermal",  # TEMP_GPU
    33: "thermal",  # TEMP_CORE
    34: "hbm_thermal",  # TEMP_MEM
    35: "thermal",  # TEMP_EDGE
    36: "thermal",  # TEMP_HOTSPOT
    37: "socket_thermal",  # TEMP_SOC
    38: "vr_thermal",  # TEMP_VR_GFX
    39: "vr_thermal",  # TEMP_VR_SOC
    40: "vr_thermal",  # TEMP_VR_MEM0
    41: "vr_thermal",  # TEMP_VR_MEM1
    42: "thermal",  # TEMP_LIQUID0
    43: "thermal",  # TEMP_LIQUID1
    44: "vr_thermal",  # VRHOT0
    45: "vr_thermal",  # VRHOT1
    46: "prochot",  # PROCHOT_CPU
    47: "prochot",  # PROCHOT_GFX
    56: "power_cap",  # PPM
    57: "reliability",  # FIT
}

# v1.6 residency counters -> reason names (the same names amdsmi's violation status maps to).
RESIDENCY_REASONS: dict[str, str] = {
    "prochot_residency_acc": "prochot",
    "ppt_residency_acc": "power_cap",
    "socket_thm_residency_acc": "socket_thermal",
    "vr_thm_residency_acc": "vr_thermal",
    "hbm_thm_residency_acc": "hbm_thermal",
}


@dataclass(frozen=True, slots=True)
class GpuMetrics:
    """The fields amdtop uses from one read of ``gpu_metrics``; ``None`` where the revision lacks it or the firmware
    left it unfilled."""

    format_revision: int
    content_revision: int
    system_clock_ns: int | None = None
    """Driver timestamp of the read (``system_clock_counter``), ns."""
    socket_power_w: float | None = None
    temperature_hotspot_c: float | None = None
    temperature_mem_c: float | None = None
    xgmi_read_kb: tuple[int | None, ...] | None = None
    """``xgmi_read_data_acc`` per link, KB (v1.4+)."""
    xgmi_write_kb: tuple[int | None, ...] | None = None
    """``xgmi_write_data_acc`` per link, KB (v1.4+)."""
    xgmi_link_speed_gbps: int | None = None
    """``xgmi_link_speed``: bit rate per lane, Gb/s (v1.4+)."""
    xgmi_link_width: int | None = None
    """``xgmi_link_width``: lanes (v1.4+)."""
    accumulation_counter: int | None = None
    """The residency counters' denominator (v1.6)."""
    residency: tuple[tuple[str, int], ...] | None = None
    """(reason, ``*_residency_acc``) (v1.6)."""
    throttle_active: tuple[str, ...] | None = None
    """Reasons set in ``indep_throttle_status`` (v1.3 only: later revisions carry only the ASIC-specific word)."""


def _value(values: tuple[int, ...], layout: Layout, name: str) -> int | None:
    slot = layout.slots.get(name)
    if slot is None:
        return None
    v = values[slot[0]]
    return None if v == _ALL_ONES[layout.codes[name]] else v


def _array(values: tuple[int, ...], layout: Layout, name: str) -> tuple[int | None, ...] | None:
    slot = layout.slots.get(name)
    if slot is None:
        return None
    start, count = slot
    ones = _ALL_ONES[layout.codes[name]]
    out = tuple(None if v == ones else v for v in values[start : start + count])
    return None if all(v is None for v in out) else out


def _reasons(bits: int | None) -> tuple[str, ...] | None:
    if bits is None:
        return None
    found = {reason for bit, reason in INDEP_THROTTLE_BITS.items() if bits >> bit & 1}
    return tuple(sorted(found))


def parse_gpu_metrics(data: bytes) -> GpuMetrics | None:
    """Parse one read of ``gpu_metrics``; ``None`` for an unknown revision, a short file or a size mismatch."""
    if len(data) < _HEADER.size:
        return None
    size, fmt_rev, content_rev = _HEADER.unpack_from(data)
    layout = LAYOUTS.get((fmt_rev, content_rev))
    if layout is None or size != layout.size or len(data) < size:
        return None
    values = layout.format.unpack_from(data)
    power = _value(values, layout, "average_socket_power")
    if power is None:
        power = _value(values, layout, "curr_socket_power")
    hot = _value(values, layout, "temperature_hotspot")
    mem = _value(values, layout, "temperature_mem")
    acc = _value(values, layout, "accumulation_counter")
    residency: tuple[tuple[str, int], ...] | None = None
    if acc is not None:
        pairs = [(reason, _value(values, layout, name)) for name, reason in RESIDENCY_REASONS.items()]
        residency = tuple((reason, v) for reason, v in pairs if v is not None) or None
    return GpuMetrics(
        format_revision=fmt_rev,
        content_revision=content_rev,
        system_clock_ns=_value(values, layout, "system_clock_counter"),
        socket_power_w=None if power is None else float(power),
        temperature_hotspot_c=None if hot is None else float(hot),
        temperature_mem_c=None if mem is None else float(mem),
        xgmi_read_kb=_array(values, layout, "xgmi_read_data_acc"),
        xgmi_write_kb=_array(values, layout, "xgmi_write_data_acc"),
        xgmi_link_speed_gbps=_value(values, layout, "xgmi_link_speed"),
        xgmi_link_width=_value(values, layout, "xgmi_link_width"),
        accumulation_counter=acc,
        residency=residency,
        throttle_active=_reasons(_value(values, layout, "indep_throttle_status")),
    )


def read_gpu_metrics(path: str) -> GpuMetrics | None:
    """Read and parse ``path`` with one open/read/close; ``None`` when it cannot be read or parsed."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        data = os.read(fd, 4096)
    except OSError:
        return None
    finally:
        os.close(fd)
    return parse_gpu_metrics(data)


def pack_gpu_metrics(revision: tuple[int, int], values: Mapping[str, int | Sequence[int]]) -> bytes:
    """Build a ``gpu_metrics`` table of ``revision`` (test fixtures, the simulated node): unnamed fields are all
    ones, as the driver leaves them when the firmware does not fill them."""
    layout = LAYOUTS[revision]
    flat: list[int] = [layout.size, revision[0], revision[1]]
    for name, code, count in FIELDS[revision]:
        given = values.get(name)
        if given is None:
            flat.extend([_ALL_ONES[code]] * count)
        elif isinstance(given, int):
            if count != 1:
                raise ValueError(f"{name} holds {count} values")
            flat.append(given)
        else:
            seq = list(given)
            if len(seq) != count:
                raise ValueError(f"{name} holds {count} values, got {len(seq)}")
            flat.extend(seq)
    return layout.format.pack(*flat)


def sample_fields(m: GpuMetrics | None) -> dict[str, object]:
    """The :class:`~amdtop.model.GpuSample` fields one parsed table gives (none for ``None``)."""
    if m is None:
        return {}
    out: dict[str, object] = {}
    if m.xgmi_read_kb is not None or m.xgmi_write_kb is not None:
        reads = m.xgmi_read_kb or (None,) * NUM_XGMI_LINKS
        writes = m.xgmi_write_kb or (None,) * NUM_XGMI_LINKS
        out["xgmi_links"] = tuple(
            XgmiLinkCounters(i, None, r, w) for i, (r, w) in enumerate(zip(reads, writes, strict=True))
        )
    if m.throttle_active is not None:
        out["throttle_active"] = m.throttle_active
    if m.residency is not None and m.accumulation_counter is not None:
        out["throttle_acc"] = tuple((reason, float(v)) for reason, v in m.residency)
        out["throttle_clock"] = float(m.accumulation_counter)
    return out
