"""The amdsmi backend's link metrics (with each link's peer), violation status and ECC counts, through the fake
amdsmi (7.0.2 API) reading the same fixture tree as the sysfs backend, whose gpu_metrics tables are built from
amdtop's v1.6 struct definition."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from types import ModuleType

import pytest

from amdtop.health.throttle import throttle_flags
from amdtop.health.traffic import fabric_traffic, group_traffic
from amdtop.model import EccCount, FlagKind
from amdtop.telemetry.amdsmi_backend import ECC_EVERY_POLLS, AmdsmiBackend
from amdtop.telemetry.gpu_metrics import pack_gpu_metrics
from amdtop.telemetry.sysfs import SysfsBackend
from tests.fixtures.sysfs_tree import MI300X_BDFS, SysfsTree, build_mi300x_8


def _write(tree: SysfsTree, i: int, kb: int, acc: int, ppt: int) -> None:
    # GPU i has written kb*(j+1) KB and read kb KB on its link j.
    table = pack_gpu_metrics(
        (1, 6),
        {
            "accumulation_counter": acc,
            "prochot_residency_acc": 0,
            "ppt_residency_acc": ppt,
            "socket_thm_residency_acc": 0,
            "vr_thm_residency_acc": 0,
            "hbm_thm_residency_acc": 0,
            "xgmi_read_data_acc": [kb] * 8,
            "xgmi_write_data_acc": [kb * (j + 1) for j in range(8)],
        },
    )
    (tree.device_dir(i) / "gpu_metrics").write_bytes(table)


@pytest.fixture
def tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> SysfsTree:
    t = build_mi300x_8(tmp_path)
    for i in range(8):
        _write(t, i, 0, 0, 0)
        ras = t.device_dir(i) / "ras"
        ras.mkdir()
        (ras / "umc_err_count").write_text("ue: 0\nce: 3\n")
        (ras / "gfx_err_count").write_text("ue: 0\nce: 0\n")
    monkeypatch.setenv("AMDTOP_FAKE_AMDSMI_SYSFS", str(t.root))
    monkeypatch.setenv("AMDTOP_FAKE_AMDSMI_PROC", str(t.proc_root))
    return t


def test_link_metrics_name_each_peer(tree: SysfsTree, smi: ModuleType) -> None:
    backend = AmdsmiBackend(smi, tree.root, clock=lambda: 1.0, hostname="fixture")
    s = backend.sample().gpus[2]
    assert s.xgmi_links is not None and len(s.xgmi_links) == 7  # MI300X: one XGMI link to each other GPU
    assert sorted(c.peer_bdf or "" for c in s.xgmi_links) == sorted(b for k, b in enumerate(MI300X_BDFS) if k != 2)
    assert s.throttle_clock == 0.0 and s.throttle_acc is not None
    assert s.ecc == (EccCount("umc", 3, 0, 0), EccCount("gfx", 0, 0, 0))


def test_traffic_and_throttle_between_polls(tree: SysfsTree, smi: ModuleType) -> None:
    t = [100.0]
    backend = AmdsmiBackend(smi, tree.root, clock=lambda: t[0], hostname="fixture")
    sysfs = SysfsBackend(tree.root, tree.proc_root, clock=lambda: t[0], hostname="fixture")
    a, sa = backend.sample(), sysfs.sample()
    for i in range(8):
        _write(tree, i, 2_000_000, 10_000, 4_000 if i == 5 else 0)
    t[0] = 110.0
    b, sb = backend.sample(), sysfs.sample()
    traffic = fabric_traffic(a, b)
    assert traffic is not None
    # GPU 0's link 0 leads to GPU 1: reads 2e6 KB and writes 2e6 KB over 10 s.
    p = traffic.pair(0, 1)
    assert p is not None and p.read_bps == 200_000_000.0 and p.write_bps == 200_000_000.0
    g = group_traffic(traffic, (0, 1, 2, 3))
    assert g.intra_read_bps == 12 * 200_000_000.0  # each of 4 GPUs reads from 3 group peers
    # The sysfs backend reads the same table: same per-GPU totals, but no peers (so no pairs).
    ts = fabric_traffic(sa, sb)
    assert ts is not None and ts.pairs == ()
    assert ts.gpu(0) is not None and traffic.gpu(0) is not None
    assert ts.gpu(0).read_bps == 8 * 200_000_000.0  # type: ignore[union-attr]  # all 8 table slots
    assert traffic.gpu(0).read_bps == 7 * 200_000_000.0  # type: ignore[union-attr]  # num_links = 7
    flags = throttle_flags([a, b], 10.0)
    assert [(f.kind, f.gpus, f.message) for f in flags] == [
        (FlagKind.GPU_THROTTLED, (5,), "GPU 5 power-capped 40 % of the last 10 s")
    ]
    assert throttle_flags([sa, sb], 10.0)[0].message == flags[0].message


def test_ecc_counts_refresh_every_n_polls(tree: SysfsTree, smi: ModuleType) -> None:
    backend = AmdsmiBackend(smi, tree.root, clock=lambda: 1.0, hostname="fixture")
    backend.sample()
    (tree.device_dir(4) / "ras" / "umc_err_count").write_text("ue: 2\nce: 3\n")
    for _ in range(ECC_EVERY_POLLS - 1):
        assert backend.sample().gpus[4].ecc == (EccCount("umc", 3, 0, 0), EccCount("gfx", 0, 0, 0))
    assert backend.sample().gpus[4].ecc == (EccCount("umc", 3, 2, 0), EccCount("gfx", 0, 0, 0))


def test_no_gpu_metrics_no_link_or_violation_fields(tmp_path: Path, smi: ModuleType, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    t = build_mi300x_8(tmp_path)
    monkeypatch.setenv("AMDTOP_FAKE_AMDSMI_SYSFS", str(t.root))
    monkeypatch.setenv("AMDTOP_FAKE_AMDSMI_PROC", str(t.proc_root))
    s = AmdsmiBackend(smi, t.root, clock=lambda: 1.0, hostname="fixture").sample().gpus[0]
    assert (s.xgmi_links, s.throttle_acc, s.throttle_clock, s.ecc) == (None, None, None, None)
    assert dataclasses.replace(s).util_pct is not None
