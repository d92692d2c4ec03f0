"""Partitions through the amdsmi backend: the fake amdsmi 7.0.2 hands out one handle per compute partition, as the
library does; amdtop must fold them back into physical GPUs and report the same partitions as the sysfs backend."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from amdtop.report import snapshot_json
from amdtop.telemetry.amdsmi_backend import AmdsmiBackend
from amdtop.telemetry.sysfs import SysfsBackend
from tests.fixtures.sysfs_tree import GIB, SysfsTree, build_mi300x_8_partitioned

CONTRACT = ("index", "kfd_node", "gpu_id", "render_minor", "hip_index", "numa_node")


def _open(smi: ModuleType, tree: SysfsTree, monkeypatch: pytest.MonkeyPatch) -> AmdsmiBackend:
    monkeypatch.setenv("AMDTOP_FAKE_AMDSMI_SYSFS", str(tree.root))
    monkeypatch.setenv("AMDTOP_FAKE_AMDSMI_PROC", str(tree.proc_root))
    return AmdsmiBackend(smi, tree.root, clock=lambda: 1.0, hostname="fixture")


def _parts(doc: dict[str, Any]) -> list[Any]:
    return [
        (g["compute_partition"], g["memory_partition"], [tuple(p[k] for k in CONTRACT) for p in g["partitions"]])
        for g in doc["gpus"]
    ]


def test_fake_lists_one_handle_per_partition(smi: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tree = build_mi300x_8_partitioned(tmp_path, compute="CPX", memory="NPS4")
    _open(smi, tree, monkeypatch).close()
    monkeypatch.setenv("AMDTOP_FAKE_AMDSMI_SYSFS", str(tree.root))
    smi.amdsmi_init()
    handles = smi.amdsmi_get_processor_handles()
    assert len(handles) == 64
    assert smi.amdsmi_get_gpu_device_bdf(handles[9]) == "0000:26:00.1"
    assert smi.amdsmi_get_gpu_kfd_info(handles[9])["current_partition_id"] == 1
    assert smi.amdsmi_get_gpu_enumeration_info(handles[9])["hip_id"] == 9
    assert smi.amdsmi_get_gpu_compute_partition(handles[9]) == "CPX"
    assert smi.amdsmi_get_gpu_memory_partition_config(handles[0])["partition_caps"] == ["NPS1", "NPS4"]
    profile = smi.amdsmi_get_gpu_accelerator_partition_profile(handles[9])
    assert profile["partition_id"] == [1] and profile["partition_profile"]["num_partitions"] == 8
    with pytest.raises(smi.AmdSmiLibraryException):
        smi.amdsmi_get_gpu_activity(handles[9])  # a secondary partition's platform device has no metric files
    smi.amdsmi_shut_down()


@pytest.mark.parametrize(("compute", "memory"), [("CPX", "NPS4"), ("DPX", "NPS1"), ("SPX", "NPS1")])
def test_same_partitions_as_sysfs(
    compute: str, memory: str, smi: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tree = build_mi300x_8_partitioned(tmp_path, compute=compute, memory=memory)
    via_smi = _open(smi, tree, monkeypatch)
    via_sysfs = SysfsBackend(tree.root, tree.proc_root, clock=lambda: 1.0, hostname="fixture")
    a, b = snapshot_json(via_smi.sample()), snapshot_json(via_sysfs.sample())
    assert len(a["gpus"]) == 8  # the partition handles are folded into their GPU
    assert _parts(a) == _parts(b)
    assert [g["processes"] for g in a["gpus"]] == [g["processes"] for g in b["gpus"]]
    assert [g["util_pct"] for g in a["gpus"]] == [g["util_pct"] for g in b["gpus"]]
    assert a["links"] == b["links"]
    via_smi.close()


def test_cpx_processes_by_partition(smi: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    backend = _open(smi, build_mi300x_8_partitioned(tmp_path), monkeypatch)
    snap = backend.sample()
    assert [(p.pid, p.partition, p.vram_bytes) for p in snap.gpus[0].processes] == [
        (4242, k, 20 * GIB) for k in range(4)
    ]
    assert [(p.pid, p.partition) for p in snap.gpus[1].processes] == [(6161, 7)]
    assert backend.topology().gpus[0].available_memory_partitions == ("NPS1", "NPS4")
    backend.close()
