"""gpu_metrics: binary tables built from amdtop's struct definitions for MI200 (v1.3) and MI300 (v1.4-1.6) parse to
the values put in; other revisions, short or garbage files parse to nothing; the sysfs backend turns the table and
the RAS files into sample fields."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from amdtop.model import EccCount
from amdtop.telemetry.gpu_metrics import LAYOUTS, pack_gpu_metrics, parse_gpu_metrics, read_gpu_metrics
from amdtop.telemetry.ras import parse_err_count
from amdtop.telemetry.sysfs import SysfsBackend
from tests.fixtures.sysfs_tree import build_mi300x_8

READS = [1_000_000 + i for i in range(8)]
WRITES = [2_000_000 + 7 * i for i in range(8)]


def mi300_v16(**extra: int) -> bytes:
    values: dict[str, int | list[int]] = {
        "temperature_hotspot": 61,
        "temperature_mem": 48,
        "curr_socket_power": 612,
        "system_clock_counter": 123_456_789,
        "accumulation_counter": 5000,
        "prochot_residency_acc": 0,
        "ppt_residency_acc": 1900,
        "socket_thm_residency_acc": 10,
        "vr_thm_residency_acc": 0,
        "hbm_thm_residency_acc": 3,
        "xgmi_link_width": 16,
        "xgmi_link_speed": 32,
        "xgmi_read_data_acc": READS,
        "xgmi_write_data_acc": WRITES,
    }
    values.update(extra)
    return pack_gpu_metrics((1, 6), values)


def test_struct_sizes_follow_the_kernel_layouts() -> None:
    # sizeof() of the kernel structs on x86-64 (natural alignment, tail padded to 8).
    assert {rev: lay.size for rev, lay in LAYOUTS.items()} == {(1, 3): 120, (1, 4): 288, (1, 5): 360, (1, 6): 384}


def test_mi300_v16_round_trip() -> None:
    m = parse_gpu_metrics(mi300_v16())
    assert m is not None
    assert (m.format_revision, m.content_revision) == (1, 6)
    assert m.socket_power_w == 612.0 and m.temperature_hotspot_c == 61.0 and m.temperature_mem_c == 48.0
    assert m.xgmi_read_kb == tuple(READS) and m.xgmi_write_kb == tuple(WRITES)
    assert (m.xgmi_link_width, m.xgmi_link_speed_gbps) == (16, 32)
    assert m.accumulation_counter == 5000
    assert dict(m.residency or ()) == {
        "prochot": 0,
        "power_cap": 1900,
        "socket_thermal": 10,
        "vr_thermal": 0,
        "hbm_thermal": 3,
    }
    assert m.throttle_active is None  # MI300 tables carry only the ASIC-specific word


@pytest.mark.parametrize("rev", [(1, 4), (1, 5)])
def test_mi300_older_revisions_have_xgmi_but_no_residency(rev: tuple[int, int]) -> None:
    m = parse_gpu_metrics(pack_gpu_metrics(rev, {"xgmi_read_data_acc": READS, "xgmi_write_data_acc": WRITES}))
    assert m is not None and m.xgmi_read_kb == tuple(READS) and m.xgmi_write_kb == tuple(WRITES)
    assert m.residency is None and m.accumulation_counter is None


def test_mi200_v13_throttler_bits() -> None:
    bits = (1 << 0) | (1 << 34) | (1 << 47)  # PPT0, TEMP_MEM, PROCHOT_GFX
    m = parse_gpu_metrics(
        pack_gpu_metrics(
            (1, 3), {"average_socket_power": 380, "temperature_hotspot": 70, "indep_throttle_status": bits}
        )
    )
    assert m is not None
    assert m.socket_power_w == 380.0 and m.temperature_hotspot_c == 70.0
    assert m.throttle_active == ("hbm_thermal", "power_cap", "prochot")
    assert m.xgmi_read_kb is None  # v1.3 has no per-link counters


def test_unfilled_fields_are_none() -> None:
    m = parse_gpu_metrics(pack_gpu_metrics((1, 6), {}))
    assert m is not None
    assert m.socket_power_w is None and m.xgmi_read_kb is None and m.residency is None and m.system_clock_ns is None


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\x01",
        mi300_v16()[:200],  # short read
        struct.pack("<HBB", 384, 1, 7) + bytes(380),  # a revision amdtop has no layout for
        struct.pack("<HBB", 384, 2, 6) + bytes(380),  # APU format
        struct.pack("<HBB", 300, 1, 6) + bytes(380),  # size disagrees with the revision
        bytes(range(256)) * 2,  # garbage
        b"\xff" * 512,
    ],
)
def test_unknown_short_or_garbage_tables_give_nothing(data: bytes) -> None:
    assert parse_gpu_metrics(data) is None


def test_read_missing_file_is_none(tmp_path: Path) -> None:
    assert read_gpu_metrics(str(tmp_path / "gpu_metrics")) is None


def test_err_count_text() -> None:
    assert parse_err_count("ue: 2\nce: 17\n") == {"uncorrectable": 2, "correctable": 17}
    assert parse_err_count("ue: 0\nce: 1\nde: 4\n") == {"uncorrectable": 0, "correctable": 1, "deferred": 4}
    assert parse_err_count("garbage\nue: x\n") == {}


def test_sysfs_backend_reads_table_and_ras(tmp_path: Path) -> None:
    tree = build_mi300x_8(tmp_path)
    dev0 = tree.device_dir(0)
    (dev0 / "gpu_metrics").write_bytes(mi300_v16())
    (dev0 / "ras").mkdir()
    (dev0 / "ras" / "umc_err_count").write_text("ue: 1\nce: 5\n")
    (dev0 / "ras" / "gfx_err_count").write_text("ue: 0\nce: 0\n")
    (tree.device_dir(1) / "gpu_metrics").write_bytes(b"\x00" * 16)  # garbage: metrics absent, GPU fine
    backend = SysfsBackend(tree.root, tree.proc_root, clock=lambda: 1.0, hostname="fixture")
    snap = backend.sample()
    s0, s1, s2 = snap.gpus[0], snap.gpus[1], snap.gpus[2]
    assert s0.xgmi_links is not None
    assert [(c.link, c.peer_bdf, c.read_kb, c.write_kb) for c in s0.xgmi_links] == [
        (i, None, READS[i], WRITES[i]) for i in range(8)
    ]
    assert s0.throttle_clock == 5000.0 and dict(s0.throttle_acc or ())["power_cap"] == 1900.0
    assert s0.ecc == (EccCount("gfx", 0, 0), EccCount("umc", 5, 1))
    assert not s1.lost and s1.util_pct is not None
    assert (s1.xgmi_links, s1.throttle_acc, s1.ecc) == (None, None, None)
    assert (s2.xgmi_links, s2.throttle_active, s2.ecc) == (None, None, None)
    # The table is re-read each poll.
    (dev0 / "gpu_metrics").write_bytes(mi300_v16(ppt_residency_acc=2400, accumulation_counter=6000))
    s0 = backend.sample().gpus[0]
    assert s0.throttle_clock == 6000.0 and dict(s0.throttle_acc or ())["power_cap"] == 2400.0


def test_sysfs_ras_counts_refresh_every_n_polls(tmp_path: Path) -> None:
    from amdtop.telemetry.sysfs import ECC_EVERY_POLLS

    tree = build_mi300x_8(tmp_path)
    ras = tree.device_dir(3) / "ras"
    ras.mkdir()
    (ras / "umc_err_count").write_text("ue: 0\nce: 0\n")
    backend = SysfsBackend(tree.root, tree.proc_root, clock=lambda: 1.0, hostname="fixture")
    assert backend.sample().gpus[3].ecc == (EccCount("umc", 0, 0),)
    (ras / "umc_err_count").write_text("ue: 1\nce: 0\n")
    seen = [backend.sample().gpus[3].ecc for _ in range(ECC_EVERY_POLLS)]
    assert seen[-2] == (EccCount("umc", 0, 0),) and seen[-1] == (EccCount("umc", 0, 1),)
