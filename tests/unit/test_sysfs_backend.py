"""The sysfs backend on built fixture trees: discovery, order, links, NUMA, metric units, lost GPUs."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from amdtop.errors import BackendUnavailable
from amdtop.model import FlagKind, LinkType
from amdtop.telemetry.kfd import parse_properties
from amdtop.telemetry.sysfs import SysfsBackend
from tests.fixtures.sysfs_tree import (
    GIB,
    LINK_KEYS,
    MI300X_BDFS,
    MIB,
    NODE_KEYS,
    PCIE_BDFS,
    build_mi300x_8,
    build_pcie_4,
)


def _open(tree) -> SysfsBackend:  # type: ignore[no-untyped-def]
    return SysfsBackend(tree.root, tree.proc_root, clock=lambda: 1.0, hostname="fixture")


def test_mi300x_static_topology(tmp_path: Path) -> None:
    topo = _open(build_mi300x_8(tmp_path)).topology()
    assert [g.bdf for g in topo.gpus] == list(MI300X_BDFS)  # the ASPEED card0 (vendor 0x1a03) is skipped
    assert [g.numa_node for g in topo.gpus] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert topo.gpus[5].cpu_affinity == tuple(range(32, 64)) + tuple(range(96, 128))
    assert {g.name for g in topo.gpus} == {"AMD Instinct MI300X"}
    assert topo.gpus[3].uuid == "0x4F2A9B3100000003"
    assert topo.gpus[0].vram_total_bytes == 206_141_652_992
    assert topo.gpus[0].power_cap_w == 750.0  # power1_cap µW -> W
    assert len(topo.links) == 28
    assert {(lk.type, lk.hops, lk.weight, lk.max_bandwidth_mbs) for lk in topo.links} == {(LinkType.XGMI, 1, 15, 64000)}
    assert [(n.id, n.mem_total_bytes) for n in topo.numa_nodes] == [(0, 792_000_000 * 1024), (1, 792_000_000 * 1024)]


def test_mi300x_metrics_units(tmp_path: Path) -> None:
    snap = _open(build_mi300x_8(tmp_path)).sample()
    assert snap.backend == "sysfs" and snap.flags == ()
    for i, s in enumerate(snap.gpus):
        assert s.util_pct == 10 * i + 5
        assert s.mem_util_pct == 3 * i
        assert s.vram_used_bytes == 283 * MIB + i * GIB
        assert s.power_w == 150 + 20 * i  # power1_input (label PPT) in µW
        assert s.temp_c == 40 + i  # temp2 junction, m°C; there is no edge sensor on MI300X
        assert s.mem_temp_c == 36 + i  # temp3 mem
        assert (s.sclk_mhz, s.mclk_mhz) == (2100.0, 1300.0)  # freq*_input Hz
        assert not s.lost
    assert [(p.pid, p.name, p.vram_bytes) for p in snap.gpus[0].processes] == [(4242, "python3", 20 * GIB)]
    assert [(p.pid, p.name, p.vram_bytes) for p in snap.gpus[4].processes] == [(5151, None, 3 * GIB)]
    assert snap.gpus[7].processes == ()


def test_pcie_box_order_links_and_power_fallback(tmp_path: Path) -> None:
    backend = _open(build_pcie_4(tmp_path))
    topo = backend.topology()
    # card4 is KFD GPU node 2: indices follow KFD order, not DRM card numbers
    assert [g.bdf for g in topo.gpus] == list(PCIE_BDFS)
    assert [g.numa_node for g in topo.gpus] == [0, 0, 1, 1]
    got = {(lk.a, lk.b): (lk.type, lk.hops, lk.weight, lk.max_bandwidth_mbs) for lk in topo.links}
    same, cross = (LinkType.PCIE, 2, 40, None), (LinkType.PCIE, 3, 52, None)
    assert got == {(0, 1): same, (2, 3): same, (0, 2): cross, (0, 3): cross, (1, 2): cross, (1, 3): cross}
    snap = backend.sample()
    assert [s.power_w for s in snap.gpus] == [60.0, 90.0, 120.0, 150.0]  # power1_average (no power1_input)
    assert [s.temp_c for s in snap.gpus] == [35.0, 36.0, 37.0, 38.0]  # junction wins over edge
    assert [s.sclk_mhz for s in snap.gpus] == [800.0, 900.0, 1000.0, 1100.0]
    assert [p.pid for p in snap.gpus[1].processes] == [777] and snap.gpus[0].processes == ()


def test_numa_minus_one_is_none(tmp_path: Path) -> None:
    topo = _open(build_pcie_4(tmp_path, numa_override={3: -1})).topology()
    assert topo.gpus[3].numa_node is None and topo.gpus[3].cpu_affinity == ()
    assert topo.gpus[2].numa_node == 1


def test_no_cpu_cpu_link_gives_hops_4(tmp_path: Path) -> None:
    tree = build_pcie_4(tmp_path)
    nodes = tree.root / "class/kfd/kfd/topology/nodes"
    for cpu in ("0", "1"):  # io_links/0 of each CPU node is the CPU<->CPU link
        assert parse_properties((nodes / cpu / "io_links/0/properties").read_text())["type"] == 1
        shutil.rmtree(nodes / cpu / "io_links/0")
    link = _open(tree).topology().link(0, 3)
    assert link is not None and (link.hops, link.weight) == (4, 50)


def test_vanishing_gpu_is_lost_others_update(tmp_path: Path) -> None:
    tree = build_mi300x_8(tmp_path)
    backend = _open(tree)
    assert backend.sample().flags == ()
    tree.vanish(3)
    tree.set_busy(0, 77)
    snap = backend.sample()
    lost = snap.gpus[3]
    assert lost.lost and lost.util_pct is None and lost.error and "No such file" in lost.error
    assert [(f.kind, f.gpus) for f in snap.flags] == [(FlagKind.GPU_LOST, (3,))]
    assert snap.gpus[0].util_pct == 77.0
    assert all(not s.lost and s.power_w is not None for i, s in enumerate(snap.gpus) if i != 3)


def test_garbage_value_is_none_not_lost(tmp_path: Path) -> None:
    tree = build_mi300x_8(tmp_path)
    backend = _open(tree)
    (tree.device_dir(1) / "gpu_busy_percent").write_text("busy\n")
    s = backend.sample().gpus[1]
    assert not s.lost and s.util_pct is None and s.vram_used_bytes == 283 * MIB + GIB


def test_no_amd_card_is_unavailable(tmp_path: Path) -> None:
    with pytest.raises(BackendUnavailable, match="no amdgpu card"):
        SysfsBackend(tmp_path)
    tree = build_mi300x_8(tmp_path / "t")
    for i in range(8):
        tree.vanish(i)  # only the BMC's VGA card is left
    with pytest.raises(BackendUnavailable):
        SysfsBackend(tree.root)


def test_fixture_properties_follow_kernel_key_order(tmp_path: Path) -> None:
    tree = build_mi300x_8(tmp_path)
    nodes = tree.root / "class/kfd/kfd/topology/nodes"
    assert [ln.split()[0] for ln in (nodes / "2/properties").read_text().splitlines()] == NODE_KEYS
    assert [ln.split()[0] for ln in (nodes / "2/io_links/1/properties").read_text().splitlines()] == LINK_KEYS
    assert (nodes / "0/gpu_id").read_text().strip() == "0"  # CPU nodes first
    assert parse_properties((nodes / "2/io_links/1/properties").read_text())["type"] == 11
