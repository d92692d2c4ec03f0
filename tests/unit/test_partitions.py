"""Compute/memory partitions: mode files, KFD partition discovery, HIP indices, JSON keys.

Ground truth comes from three real KFD topology captures (ROCm/k8s-device-plugin test data, named in each packed
file's first line) grafted under a built sysfs root, and from built SPX and CPX/NPS4 trees.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from amdtop.hip_devices import (
    device_indices,
    device_numa,
    group_numa_nodes,
    hip_devices,
    is_partitioned,
    physical_gpus,
    physical_worker,
    resolve_hip_index,
)
from amdtop.model import FlagKind, GpuInfo, LinkType, Partition, Topology, WorkerState, WorkerStatus
from amdtop.partition_groups import partition_groups, partition_split_flags
from amdtop.report import snapshot_json
from amdtop.telemetry.partitions import COMPUTE_MODES, MEMORY_MODES, parse_mode, parse_modes, read_modes
from amdtop.telemetry.sim import GpuDemand, SimBackend
from amdtop.telemetry.sysfs import SysfsBackend
from tests.fixtures.kfd_capture import MI210_XGMI_PCIE, MI300X_CPX, MI308X_4PART, graft, source
from tests.fixtures.sysfs_tree import GIB, MI300X_VRAM, MIB, build_mi300x_8, build_mi300x_8_partitioned

CONTRACT_PART_KEYS = {"index", "kfd_node", "gpu_id", "render_minor", "hip_index"}


def _open(root: Path, proc: Path = Path("/nonexistent-proc")) -> SysfsBackend:
    return SysfsBackend(root, proc, clock=lambda: 1.0, hostname="fixture")


# ------------------------------------------------------------------------------------------------- mode files


@pytest.mark.parametrize(
    ("text", "expected"),
    [("CPX\n", "CPX"), ("spx", "SPX"), ("  QPX \n", "QPX"), ("UNKNOWN\n", None), ("", None), (None, None), ("X", None)],
)
def test_parse_compute_mode(text: str | None, expected: str | None) -> None:
    assert parse_mode(text, COMPUTE_MODES) == expected


def test_parse_available_modes() -> None:
    assert parse_modes("SPX, DPX, QPX, CPX\n", COMPUTE_MODES) == ("SPX", "DPX", "QPX", "CPX")
    assert parse_modes("NPS1, NPS4\n", MEMORY_MODES) == ("NPS1", "NPS4")
    assert parse_modes("NPS1,NPS4,NPS4,bogus", MEMORY_MODES) == ("NPS1", "NPS4")
    assert parse_modes("\x00\xff garbage", COMPUTE_MODES) == ()
    assert parse_modes(None, MEMORY_MODES) == ()


def test_mode_files_absent_or_garbage(tmp_path: Path) -> None:
    assert read_modes(tmp_path).compute is None
    (tmp_path / "current_compute_partition").write_bytes(b"\xff\xfe\x00")
    (tmp_path / "current_memory_partition").write_text("NPS4\n")
    modes = read_modes(tmp_path)
    assert (modes.compute, modes.memory, modes.available_compute) == (None, "NPS4", ())


# ------------------------------------------------------------------------------------------------ built trees


def test_spx_tree_has_no_partitions(tmp_path: Path) -> None:
    doc = snapshot_json(_open(build_mi300x_8(tmp_path).root).sample())
    for gpu in doc["gpus"]:
        assert gpu["compute_partition"] is None and gpu["memory_partition"] is None and gpu["partitions"] == []
    topo = _open(build_mi300x_8(tmp_path / "b").root).topology()
    assert not is_partitioned(topo)
    assert [(d.hip_index, d.gpu, d.partition) for d in hip_devices(topo)] == [(i, i, None) for i in range(8)]


def test_spx_nps1_mode_files_without_partitions(tmp_path: Path) -> None:
    tree = build_mi300x_8_partitioned(tmp_path, compute="SPX", memory="NPS1")
    topo = _open(tree.root).topology()
    assert {(g.compute_partition, g.memory_partition, g.partitions) for g in topo.gpus} == {("SPX", "NPS1", ())}
    assert topo.gpus[0].available_compute_partitions == ("SPX", "DPX", "QPX", "CPX")
    assert topo.gpus[0].available_memory_partitions == ("NPS1", "NPS4")


def test_cpx_nps4_tree(tmp_path: Path) -> None:
    tree = build_mi300x_8_partitioned(tmp_path, compute="CPX", memory="NPS4")
    backend = SysfsBackend(tree.root, tree.proc_root, clock=lambda: 1.0, hostname="fixture")
    topo = backend.topology()
    assert len(topo.gpus) == 8  # the amdgpu_xcp platform DRM cards are not GPUs
    for i, gpu in enumerate(topo.gpus):
        assert (gpu.compute_partition, gpu.memory_partition) == ("CPX", "NPS4")
        assert [p.index for p in gpu.partitions] == list(range(8))
        assert [p.hip_index for p in gpu.partitions] == list(range(8 * i, 8 * i + 8))
        assert [p.render_minor for p in gpu.partitions] == list(range(128 + 8 * i, 136 + 8 * i))
        assert [p.gpu_id for p in gpu.partitions] == [20000 + 100 * i + p for p in range(8)]
        assert [p.kfd_node for p in gpu.partitions] == list(range(2 + 8 * i, 10 + 8 * i))
        assert {p.numa_node for p in gpu.partitions} == {0 if i < 4 else 1}
        assert {p.mem_bytes for p in gpu.partitions} == {MI300X_VRAM // 8}  # CPX/NPS4: a quarter's half, 24 GB
        assert {p.compute_units for p in gpu.partitions} == {38}  # one XCD
    # physical links come from partition 0 of each GPU: XGMI, weight 41 between GPUs' partitions
    assert {(lk.type, lk.hops, lk.weight) for lk in topo.links} == {(LinkType.XGMI, 1, 41)}
    snap = backend.sample()
    # a TP-4 group inside GPU 0 shows on GPU 0 once per partition; a partition-7 process lands on GPU 1
    assert [(p.pid, p.partition, p.vram_bytes) for p in snap.gpus[0].processes] == [
        (4242, k, 20 * GIB) for k in range(4)
    ]
    assert [(p.pid, p.name, p.partition) for p in snap.gpus[1].processes] == [(6161, "python3", 7)]
    doc = snapshot_json(snap)
    assert json.loads(json.dumps(doc)) == doc
    part = doc["gpus"][2]["partitions"][5]
    assert set(part) >= CONTRACT_PART_KEYS
    assert {k: part[k] for k in CONTRACT_PART_KEYS} == {
        "index": 5,
        "kfd_node": 23,
        "gpu_id": 20205,
        "render_minor": 149,
        "hip_index": 21,
    }
    assert doc["gpus"][0]["processes"][1]["partition"] == 1


def test_hip_index_maps_tp_groups_to_partitions(tmp_path: Path) -> None:
    topo = _open(build_mi300x_8_partitioned(tmp_path).root).topology()
    assert is_partitioned(topo)
    assert resolve_hip_index(topo, 0) == (0, 0)
    assert resolve_hip_index(topo, 13) == (1, 5)
    assert resolve_hip_index(topo, 63) == (7, 7)
    assert resolve_hip_index(topo, 64) is None
    assert physical_gpus(topo, range(8)) == (0,)  # TP-8 over one GPU's partitions
    assert physical_gpus(topo, [6, 7, 8, 9]) == (0, 1)
    assert group_numa_nodes(topo, [30, 31, 32, 33]) == (0, 1)  # GPU 3 on node 0, GPU 4 on node 1


def test_cli_topo_json_on_cpx_tree(tmp_path: Path) -> None:
    tree = build_mi300x_8_partitioned(tmp_path)
    cmd = [sys.executable, "-m", "amdtop", "topo", "--json", "--backend", "sysfs", "--sysfs-root", str(tree.root)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=True)
    doc = json.loads(out.stdout)
    assert [len(g["partitions"]) for g in doc["gpus"]] == [8] * 8
    assert [g["index"] for g in doc["gpus"]] == list(range(8))  # still the physical GPUs
    assert doc["gpus"][7]["partitions"][7]["hip_index"] == 63


# ----------------------------------------------------------------------------------------------- real captures


def test_captures_name_their_source() -> None:
    for packed in (MI300X_CPX, MI308X_4PART, MI210_XGMI_PCIE):
        assert source(packed).startswith("source: https://github.com/ROCm/k8s-device-plugin/tree/")


def test_real_mi300x_cpx_capture(tmp_path: Path) -> None:
    topo = _open(graft(MI300X_CPX, tmp_path, compute="CPX")).topology()
    assert len(topo.gpus) == 8
    assert [len(g.partitions) for g in topo.gpus] == [8, 8, 8, 8, 8, 8, 8, 7]  # one GPU exposed 7 of 8
    devices = hip_devices(topo)
    assert [d.hip_index for d in devices] == list(range(63))  # 63 HIP devices, as HIP/vLLM/amd-smi see them
    last = topo.gpus[7]
    assert last.bdf == "0000:e5:00.0"
    assert [p.hip_index for p in last.partitions] == list(range(56, 63))
    assert [p.render_minor for p in last.partitions] == list(range(184, 191))
    assert [p.kfd_node for p in topo.gpus[0].partitions] == list(range(2, 10))
    assert {p.compute_units for g in topo.gpus for p in g.partitions} == {38}  # simd_count 152 / 4
    assert resolve_hip_index(topo, 62) == (7, 6)
    assert {(lk.type, lk.hops, lk.weight) for lk in topo.links} == {(LinkType.XGMI, 1, 41)}


def test_real_mi308x_capture(tmp_path: Path) -> None:
    topo = _open(graft(MI308X_4PART, tmp_path)).topology()
    # no mode files were grafted: four KFD nodes per GPU are still four partitions, the modes unknown
    assert [len(g.partitions) for g in topo.gpus] == [4] * 8
    assert {g.compute_partition for g in topo.gpus} == {None}
    assert [g.bdf[:4] for g in topo.gpus] == ["0000"] * 4 + ["0001"] * 4  # a second PCI domain
    gpu5 = topo.gpus[5]
    assert [p.hip_index for p in gpu5.partitions] == [20, 21, 22, 23]
    assert [p.render_minor for p in gpu5.partitions] == [168, 169, 170, 171]  # 8 minors reserved per GPU
    assert [p.gpu_id for p in gpu5.partitions] == [23747, 41154, 58562, 2759]
    # a quarter of 192 GB each (NPS4), the last partition 16 MiB less (the driver reserves it at the top)
    assert {tuple(p.mem_bytes for p in g.partitions) for g in topo.gpus} == {(48 * GIB,) * 3 + (48 * GIB - 16 * MIB,)}
    assert {p.compute_units for g in topo.gpus for p in g.partitions} == {20}
    assert physical_gpus(topo, range(4, 12)) == (1, 2)


def test_real_mi210_capture_is_not_partitioned(tmp_path: Path) -> None:
    topo = _open(graft(MI210_XGMI_PCIE, tmp_path)).topology()
    assert [g.partitions for g in topo.gpus] == [()] * 8
    assert [(d.hip_index, d.gpu) for d in hip_devices(topo)] == [(i, i) for i in range(8)]


# --------------------------------------------------------------------------------------------- pure mapping


def _gpu(index: int, parts: tuple[Partition, ...] = (), numa: int | None = 0) -> GpuInfo:
    return GpuInfo(index, "AMD Instinct MI300X", f"0000:{index + 5:02x}:00.0", numa, partitions=parts)


def test_mixed_modes_number_hip_devices_in_gpu_order() -> None:
    # GPU 0 SPX, GPU 1 DPX with its partitions' KFD HIP indices, GPU 2 SPX
    dpx = (Partition(0, hip_index=1, numa_node=1), Partition(1, hip_index=2, numa_node=1))
    topo = Topology((_gpu(0), _gpu(1, dpx), _gpu(2)), (), ())
    assert [(d.hip_index, d.gpu, d.partition, d.numa_node) for d in hip_devices(topo)] == [
        (0, 0, None, 0),
        (1, 1, 0, 1),
        (2, 1, 1, 1),
        (3, 2, None, 0),
    ]
    assert resolve_hip_index(topo, 3) == (2, None)


def test_partitions_without_kfd_hip_index_get_the_next_free_ones() -> None:
    topo = Topology((_gpu(0, (Partition(0), Partition(1))), _gpu(1)), (), ())
    assert [(d.hip_index, d.gpu, d.partition) for d in hip_devices(topo)] == [(0, 0, 0), (1, 0, 1), (2, 1, None)]


# ------------------------------------------------------------------------------------------------ simulated node


def test_sim_cpx_node_matches_the_real_layout() -> None:
    topo = SimBackend(partition="CPX").topology()
    assert SimBackend(scenario="mi300x-8-cpx").topology() == topo
    assert [(g.compute_partition, g.memory_partition, len(g.partitions)) for g in topo.gpus] == [("CPX", "NPS4", 8)] * 8
    assert [d.hip_index for d in hip_devices(topo)] == list(range(64))
    assert topo.gpus[3].partitions[2] == Partition(
        index=2,
        kfd_node=2 + 8 * 3 + 2,
        gpu_id=topo.gpus[3].partitions[2].gpu_id,
        render_minor=128 + 8 * 3 + 2,
        hip_index=26,
        numa_node=0,
        mem_bytes=MI300X_VRAM // 8,
        compute_units=38,
    )
    assert {(lk.type, lk.hops, lk.weight) for lk in topo.links} == {(LinkType.XGMI, 1, 41)}
    dpx = SimBackend(partition="dpx").topology()
    assert {(g.memory_partition, len(g.partitions)) for g in dpx.gpus} == {("NPS1", 2)}
    spx = SimBackend(partition="SPX/NPS1").topology()
    assert {(g.compute_partition, g.partitions) for g in spx.gpus} == {("SPX", ())}
    assert SimBackend().topology().gpus[0].compute_partition is None  # the default demo node is unchanged


@pytest.mark.parametrize("bad", ["XPX", "CPX/NPS3", "", "CPX/"])
def test_sim_rejects_unknown_modes(bad: str) -> None:
    with pytest.raises(ValueError, match="mode must be one of"):
        SimBackend(partition=bad)


def test_sim_partition_needs_an_mi300x_scenario() -> None:
    with pytest.raises(ValueError, match="no partition modes"):
        SimBackend(scenario="pcie-4", partition="CPX")


def _amdtop(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "amdtop", *args], capture_output=True, text=True, timeout=60)


def test_cli_demo_partition() -> None:
    out = _amdtop("snapshot", "--json", "--demo", "--demo-partition", "QPX/NPS4")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert {(g["compute_partition"], g["memory_partition"], len(g["partitions"])) for g in doc["gpus"]} == {
        ("QPX", "NPS4", 4)
    }
    assert doc["gpus"][7]["partitions"][3]["hip_index"] == 31


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--demo", "--demo-partition", "XPX"), "argument --demo-partition: 'XPX': compute mode must be one of"),
        (("--demo-partition", "CPX"), "--demo-partition: only the simulated node has a settable partition mode"),
    ],
)
def test_cli_demo_partition_bad_input(args: tuple[str, ...], message: str) -> None:
    out = _amdtop("topo", "--json", *args)
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.startswith("amdtop: error: ") and message in out.stderr and out.stderr.count("\n") == 1


# ------------------------------------------------------------------------------------------- TP groups and flags


def _worker(name: str, gpus: tuple[int, ...], state: WorkerState = WorkerState.READY) -> WorkerStatus:
    return WorkerStatus(name, state, gpus)


def test_profiles_name_hip_devices_on_a_partitioned_node() -> None:
    cpx = SimBackend(partition="CPX").topology()
    assert device_indices(cpx) == tuple(range(64))
    assert device_numa(cpx, 31) == 0 and device_numa(cpx, 32) == 1 and device_numa(cpx, 64) is None
    spx = SimBackend().topology()
    assert device_indices(spx) == tuple(range(8))  # unpartitioned: the GPU indices
    assert device_numa(spx, 5) == 1


def test_physical_worker_maps_hip_indices_to_gpus() -> None:
    cpx = SimBackend(partition="CPX").topology()
    w = _worker("llama", (6, 7, 8, 9))
    assert physical_worker(w, cpx).gpus == (0, 1)
    assert physical_worker(w, SimBackend().topology()) is w  # unpartitioned: untouched


def test_partition_split_flag() -> None:
    cpx = SimBackend(partition="CPX").topology()
    workers = [
        _worker("inside", tuple(range(8, 16))),  # TP-8 on GPU 1's partitions: fine
        _worker("split", (6, 7, 8, 9)),  # TP-4 over GPUs 0 and 1: fits on one GPU
        _worker("wide", tuple(range(16, 32)), WorkerState.READY),  # TP-16 cannot fit on one GPU: not flagged
        _worker("stopped", (38, 41), WorkerState.STOPPED),
    ]
    flags = partition_split_flags(cpx, workers)
    assert [(f.kind, f.worker, f.gpus) for f in flags] == [(FlagKind.PARTITION_SPLIT, "split", (0, 1))]
    assert "GPU0.6, GPU0.7, GPU1.0, GPU1.1" in flags[0].message
    assert dict(flags[0].extra) == {"hip_devices": (6, 7, 8, 9), "numa_nodes": (0,)}
    assert hash(flags[0])  # flags stay hashable (frozen)
    doc = json.loads(json.dumps(snapshot_json(SimBackend(partition="CPX").sample(), flags=flags)))
    assert doc["flags"][0]["kind"] == "partition_split" and doc["flags"][0]["hip_devices"] == [6, 7, 8, 9]
    assert partition_split_flags(SimBackend().topology(), workers) == []  # unpartitioned node: never
    groups = partition_groups(cpx, workers)
    assert [(g.worker, g.gpus, g.numa_nodes) for g in groups] == [
        ("inside", (1,), (0,)),
        ("split", (0, 1), (0,)),
        ("wide", (2, 3), (0,)),
    ]


def test_exporter_publishes_partitions() -> None:
    from amdtop.exporter.families import build_families
    from amdtop.pipeline import NodeFrame

    fams = {f.name: f for f in build_families(NodeFrame(SimBackend(partition="CPX", hostname="h").sample()))}
    modes = fams["amdtop_gpu_partition_mode_info"].samples
    assert len(modes) == 8 and {
        (s.labels["compute_partition_type"], s.labels["memory_partition_type"]) for s in modes
    } == {("CPX", "NPS4")}
    parts = fams["amdtop_gpu_partition_info"].samples
    assert len(parts) == 64
    last = next(s for s in parts if s.labels["gpu_id"] == "7" and s.labels["partition_id"] == "7")
    assert (last.labels["hip_index"], last.labels["render_minor"], last.labels["numa_node"]) == ("63", "191", "1")
    plain = {f.name for f in build_families(NodeFrame(SimBackend().sample()))}
    assert "amdtop_gpu_partition_info" not in plain and "amdtop_gpu_partition_mode_info" not in plain


def test_sim_demand_by_hip_device_lands_on_partitions() -> None:
    sim = SimBackend(seed=3, partition="CPX")
    sim.set_device_demand("tp8", {h: GpuDemand(1.0, 40 * GIB, 777) for h in range(8, 16)})  # all of GPU 1
    sim.set_device_demand("half", {h: GpuDemand(1.0, 10 * GIB, 888) for h in (16, 17, 18, 19)})  # half of GPU 2
    snap = sim.sample()
    one, two = snap.sample(1), snap.sample(2)
    assert one is not None and two is not None
    assert [(p.pid, p.partition) for p in one.processes] == [(777, k) for k in range(8)]
    assert one.util_pct is not None and one.util_pct >= 98
    assert two.util_pct is not None and 45 <= two.util_pct <= 55  # four of eight partitions busy
    assert {p.partition for p in two.processes} == {0, 1, 2, 3}
    sim.set_device_demand("tp8", {})
    assert sim.sample().gpus[1].processes == ()


def test_topo_text_lists_partitions(tmp_path: Path) -> None:
    from amdtop.topo_text import render_topology

    text = render_topology(_open(graft(MI300X_CPX, tmp_path, compute="CPX")).topology())
    assert "  GPU7 CPX: 7 partitions, HIP 56-62, render minors 184-190, KFD nodes 58-64, NUMA 1" in text
    assert "Compute partitions" not in render_topology(SimBackend().topology())
