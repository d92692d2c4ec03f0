"""The NVML backend run against the real H200 capture (tests/fixtures/nvml/h200_replay.json) through ReplayNvml.

The fixture was recorded on the lent NVIDIA H200 machine with
``python -m amdtop.telemetry.nvml_replay record`` while a torch job held ~9.5 GB and kept the GPU busy.
Multi-GPU cases (links, one GPU lost among several) clone the real GPU's answers onto a second handle.
"""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from amdtop.cli.main import main
from amdtop.errors import BackendUnavailable
from amdtop.model import LinkType
from amdtop.report import snapshot_json
from amdtop.telemetry.base import BackendOptions
from amdtop.telemetry.nvml import NvmlBackend, open_backend
from amdtop.telemetry.nvml_replay import ReplayMiss, ReplayNvml, load_fixture, materialize

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "nvml"
REPLAY = FIXTURES / "h200_replay.json"
NOT_SUPPORTED, GPU_IS_LOST, UNKNOWN = 3, 15, 999


def key(name: str, *args: Any) -> str:
    return json.dumps([name, list(args)], sort_keys=True)


def h(token: str) -> dict[str, str]:
    return {"__handle__": token}


@pytest.fixture
def fixture() -> dict[str, Any]:
    return load_fixture(REPLAY)


@pytest.fixture
def roots(fixture: dict[str, Any], tmp_path: Path) -> BackendOptions:
    sysfs, proc = materialize(fixture, tmp_path)
    return BackendOptions(sysfs_root=sysfs, proc_root=proc)


def two_gpus(fixture: dict[str, Any], nvlinks: int = 0, ancestor: int | None = None) -> dict[str, Any]:
    """The real GPU plus a clone of it (second BDF, second UUID) on handle h1."""
    doc = copy.deepcopy(fixture)
    calls = doc["calls"]
    for k, results in list(calls.items()):
        if '"h0"' in k:
            clone = copy.deepcopy(results)
            if k.startswith('["nvmlDeviceGetPciInfo"'):
                clone[0]["__struct__"]["busId"] = "00000000:00:07.0"
            if k.startswith('["nvmlDeviceGetUUID"'):
                clone = ["GPU-clone"]
            calls[k.replace('"h0"', '"h1"')] = clone
    calls[key("nvmlDeviceGetCount")] = [2]
    calls[key("nvmlDeviceGetHandleByIndex", 1)] = [h("h1")]
    for tok in ("h0", "h1"):
        for link in range(nvlinks):
            calls[key("nvmlDeviceGetNvLinkState", h(tok), link)] = [1]
            calls[key("nvmlDeviceGetNvLinkRemotePciInfo", h(tok), link)] = [
                {"__struct__": {"busId": f"00000000:{0x80 + link % 4:02X}:00.0"}}
            ]
            calls[key("nvmlDeviceGetNvLinkRemoteDeviceType", h(tok), link)] = [2]  # NVSwitch
        calls[key("nvmlDeviceGetNvLinkState", h(tok), nvlinks)] = [{"__error__": 2 if nvlinks else NOT_SUPPORTED}]
    if ancestor is not None:
        calls[key("nvmlDeviceGetTopologyCommonAncestor", h("h0"), h("h1"))] = [ancestor]
    return doc


def strip_volatile(doc: dict[str, Any]) -> dict[str, Any]:
    doc = dict(doc)
    doc.pop("hostname")
    doc.pop("timestamp")
    return doc


def test_replay_of_real_h200_gives_the_recorded_snapshot(fixture: dict[str, Any], roots: BackendOptions) -> None:
    backend = NvmlBackend(ReplayNvml(fixture), roots)
    for _ in range(fixture["meta"]["polls"]):
        snap = backend.sample()
    assert strip_volatile(snapshot_json(snap)) == strip_volatile(fixture["expected_snapshot"])
    gpu = snap.topology.gpus[0]
    assert (gpu.name, gpu.vendor, gpu.bdf) == ("NVIDIA H200", "NVIDIA", "0000:00:06.0")
    assert gpu.uuid is not None and gpu.uuid.startswith("GPU-")
    assert gpu.power_cap_w == 700.0  # 700000 mW enforced limit
    assert gpu.vram_total_bytes == 150_754_820_096
    # NVML says NOT_SUPPORTED, sysfs numa_node says -1: unknown, not node 0.
    assert gpu.numa_node is None
    assert gpu.cpu_affinity == tuple(range(16))  # NVML cpuSet 0xffff
    s = snap.gpus[0]
    assert s.power_w is not None and 600 < s.power_w < 700  # mW converted to W
    assert s.util_pct == 95.0 and s.mem_util_pct == 22.0
    assert s.processes and s.processes[0].name == "python3" and s.processes[0].vram_bytes == 9_506_390_016
    assert snap.topology.links == () and snap.flags == ()


def test_cli_snapshot_matches_the_captured_cli_output(
    fixture: dict[str, Any], roots: BackendOptions, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", ReplayNvml(fixture))
    assert main(["snapshot", "--json", "--backend", "nvml", "--sysfs-root", str(roots.sysfs_root)]) == 0
    got = json.loads(capsys.readouterr().out)
    captured = json.loads((FIXTURES / "h200_snapshot.json").read_text())
    static = ("index", "name", "bdf", "numa_node", "vendor", "uuid", "cpu_affinity", "vram_total_bytes", "power_cap_w")
    assert [{k: g[k] for k in static} for g in got["gpus"]] == [{k: g[k] for k in static} for g in captured["gpus"]]
    assert got["links"] == captured["links"] and got["backend"] == "nvml"
    assert got["numa_nodes"] == captured["numa_nodes"]


def test_numa_from_sysfs_when_nvml_says_not_supported(fixture: dict[str, Any], roots: BackendOptions) -> None:
    (roots.sysfs_root / "bus/pci/devices/0000:00:06.0/numa_node").write_text("0\n")
    replay = ReplayNvml(fixture)
    replay.fail("h0", NOT_SUPPORTED, "nvmlDeviceGetCpuAffinity")
    topo = NvmlBackend(replay, roots).topology()
    assert topo.gpus[0].numa_node == 0
    assert topo.gpus[0].cpu_affinity == tuple(range(16))  # the node's cpulist, since NVML gave no mask


def test_unsupported_field_is_none_and_not_asked_again(fixture: dict[str, Any], roots: BackendOptions) -> None:
    replay = ReplayNvml(fixture)
    backend = NvmlBackend(replay, roots)
    replay.fail("h0", NOT_SUPPORTED, "nvmlDeviceGetPowerUsage")
    first = backend.sample().gpus[0]
    assert first.power_w is None and not first.lost and first.temp_c is not None and first.util_pct is not None
    replay.log.clear()
    second = backend.sample().gpus[0]
    assert second.power_w is None and "nvmlDeviceGetPowerUsage" not in replay.log
    assert "nvmlDeviceGetUtilizationRates" in replay.log


def test_lost_gpu_others_continue(fixture: dict[str, Any], roots: BackendOptions) -> None:
    replay = ReplayNvml(two_gpus(fixture, ancestor=30))
    backend = NvmlBackend(replay, roots)
    assert [g.bdf for g in backend.topology().gpus] == ["0000:00:06.0", "0000:00:07.0"]
    replay.fail("h1", GPU_IS_LOST)
    snap = backend.sample()
    assert not snap.gpus[0].lost and snap.gpus[0].util_pct is not None
    assert snap.gpus[1].lost and snap.gpus[1].util_pct is None and "15" in (snap.gpus[1].error or "")
    assert [(f.kind.value, f.gpus) for f in snap.flags] == [("gpu_lost", (1,))]
    replay.log.clear()
    snap = backend.sample()  # GPU_IS_LOST is sticky: no more calls on that GPU
    assert snap.gpus[1].lost and snap.gpus[0].util_pct is not None
    assert replay.log.count("nvmlDeviceGetUtilizationRates") == 1


def test_transient_error_is_lost_for_one_poll_only(fixture: dict[str, Any], roots: BackendOptions) -> None:
    replay = ReplayNvml(fixture)
    backend = NvmlBackend(replay, roots)
    replay.fail("h0", UNKNOWN, "nvmlDeviceGetTemperature")
    assert backend.sample().gpus[0].lost
    replay._faults.clear()
    assert not backend.sample().gpus[0].lost


@pytest.mark.parametrize(("ancestor", "hops"), [(10, 2), (30, 2), (40, 2), (50, 3)])
def test_pcie_hops_from_common_ancestor(
    fixture: dict[str, Any], roots: BackendOptions, ancestor: int, hops: int
) -> None:
    link = NvmlBackend(ReplayNvml(two_gpus(fixture, ancestor=ancestor)), roots).topology().link(0, 1)
    assert link is not None and link.type is LinkType.PCIE and link.hops == hops and link.nvlinks is None


def test_nvlink_through_nvswitch_counts_links(fixture: dict[str, Any], roots: BackendOptions) -> None:
    link = NvmlBackend(ReplayNvml(two_gpus(fixture, nvlinks=18)), roots).topology().link(0, 1)
    assert link is not None and link.type is LinkType.NVLINK and link.nvlinks == 18 and link.hops == 1
    assert link.direct and link.max_bandwidth_mbs == 18 * 25_000


def test_open_backend_unavailable(fixture: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    broken = copy.deepcopy(fixture)
    broken["calls"][key("nvmlInit")] = [{"__error__": 12, "message": "NVML Shared Library Not Found"}]
    monkeypatch.setitem(sys.modules, "pynvml", ReplayNvml(broken))
    with pytest.raises(BackendUnavailable, match="Not Found"):
        open_backend(BackendOptions())
    none = copy.deepcopy(fixture)
    none["calls"][key("nvmlDeviceGetCount")] = [0]
    monkeypatch.setitem(sys.modules, "pynvml", ReplayNvml(none))
    with pytest.raises(BackendUnavailable, match="no GPU"):
        open_backend(BackendOptions())


def test_replay_fails_loudly_on_unrecorded_call(fixture: dict[str, Any]) -> None:
    with pytest.raises(ReplayMiss):
        ReplayNvml(fixture).nvmlDeviceGetFanSpeed(None)


def test_host_helpers(tmp_path: Path) -> None:
    from amdtop.telemetry.nvml_host import host_numa_nodes, mask_to_cpus, normalize_bdf, pci_numa_node

    assert normalize_bdf("00000000:1B:00.0") == "0000:1b:00.0" and normalize_bdf(b"00000001:C3:00.0") == "0001:c3:00.0"
    assert mask_to_cpus([0b101, 1]) == (0, 2, 64)
    dev = tmp_path / "bus/pci/devices/0000:1b:00.0"
    dev.mkdir(parents=True)
    assert pci_numa_node(tmp_path, "0000:1b:00.0") is None  # no file
    (dev / "numa_node").write_text("-1\n")
    assert pci_numa_node(tmp_path, "0000:1b:00.0") is None
    (dev / "numa_node").write_text("1\n")
    assert pci_numa_node(tmp_path, "0000:1b:00.0") == 1
    for n, cpus in ((1, "8-15"), (0, "0-7")):
        d = tmp_path / f"devices/system/node/node{n}"
        d.mkdir(parents=True)
        (d / "cpulist").write_text(cpus + "\n")
        (d / "meminfo").write_text(f"Node {n} MemTotal:       1024 kB\nNode {n} MemFree: 1 kB\n")
    (tmp_path / "devices/system/node/possible").write_text("0-1\n")
    nodes = host_numa_nodes(tmp_path)
    assert [(x.id, x.cpus[0], x.mem_total_bytes) for x in nodes] == [(0, 0, 1024 * 1024), (1, 8, 1024 * 1024)]


def test_process_names_cached_while_listed(fixture: dict[str, Any], roots: BackendOptions) -> None:
    replay = ReplayNvml(fixture)
    backend = NvmlBackend(replay, roots)
    assert backend.sample().gpus[0].processes[0].name == "python3"
    (roots.proc_root / "454" / "comm").write_text("renamed\n")
    assert backend.sample().gpus[0].processes[0].name == "python3"  # same pid still listed: no re-read
    replay.fail("h0", NOT_SUPPORTED, "nvmlDeviceGetComputeRunningProcesses")
    assert backend.sample().gpus[0].processes == ()
    assert backend._names == {}  # pid left the GPU: forgotten, a reused pid will be read afresh


def test_real_lone_gpu_nvlink_answer_is_recorded(fixture: dict[str, Any]) -> None:
    # The single-GPU VM's H200 says NOT_SUPPORTED for NVLink state: cloned pairs fall back to PCIe, as there.
    assert fixture["calls"][key("nvmlDeviceGetNvLinkState", h("h0"), 0)][0]["__error__"] == NOT_SUPPORTED
