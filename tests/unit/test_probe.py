"""Link probe arithmetic, flag logic, cache and CLI checks with a fake distributed backend (no torch needed)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pytest

from amdtop.cli.main import main
from amdtop.model import (
    GpuInfo,
    GpuProcess,
    GpuSample,
    Link,
    LinkType,
    NodeSnapshot,
    Topology,
    WorkerState,
    WorkerStatus,
)
from amdtop.probe.arith import (
    H200_NVLINK_P2P_GBS,
    XGMI_GBS_PER_LINK,
    allreduce_busbw_gbps,
    busbw_factor,
    expected_p2p_gbps,
    format_size,
    parse_size,
)
from amdtop.probe.cache import cache_path, load_results, save_results
from amdtop.probe.guard import busy_gpus
from amdtop.probe.model import CopyResult, results_from_json, results_json
from amdtop.probe.runner import copy_pairs, probe_groups, run_probe

GIB = 1024**3
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "probe"


def node(n: int, link: LinkType, name: str = "NVIDIA H200") -> Topology:
    gpus = tuple(GpuInfo(i, name, f"0000:{i + 1:02x}:00.0", 0, vendor="NVIDIA") for i in range(n))
    nvl = 18 if link is LinkType.NVLINK else None
    links = tuple(
        Link(a, b, link, hops=1 if link is not LinkType.PCIE else 2, nvlinks=nvl)
        for a in range(n)
        for b in range(a + 1, n)
    )
    return Topology(gpus, links, ())


class FakeDist:
    """Copies at a configured GB/s per directed pair; all-reduce as a ring at ``bus_gbps`` bus bandwidth."""

    name = "fake"

    def __init__(self, rates: dict[tuple[int, int], float], default: float = 380.0, bus_gbps: float = 350.0) -> None:
        self.rates, self.default, self.bus_gbps = rates, default, bus_gbps
        self.copies: list[tuple[int, int, int]] = []
        self.groups: list[tuple[int, ...]] = []

    def copy_seconds(self, src: int, dst: int, nbytes: int, iters: int) -> float:
        self.copies.append((src, dst, nbytes))
        return nbytes / (self.rates.get((src, dst), self.default) * 1e9)

    def allreduce_seconds(self, gpus: Sequence[int], sizes: Sequence[int], iters: int) -> dict[int, float]:
        self.groups.append(tuple(gpus))
        n = len(gpus)
        return {s: s * busbw_factor(n) / (self.bus_gbps * 1e9) if n > 1 else 1e-5 for s in sizes}


def test_busbw_follows_nccl_tests() -> None:
    # 1 GiB in 5 ms: algbw 214.7 GB/s; 4 ranks: x 2*3/4 = 1.5
    assert allreduce_busbw_gbps(GIB, 0.005, 4) == pytest.approx(GIB / 0.005 / 1e9 * 1.5)
    assert busbw_factor(2) == 1.0 and busbw_factor(8) == pytest.approx(1.75) and busbw_factor(1) == 0.0


def test_sizes_parse_and_format() -> None:
    assert [parse_size(s) for s in ("1M", "16m", "1G", "1GiB", "4096")] == [2**20, 2**24, GIB, GIB, 4096]
    assert format_size(GIB) == "1G" and format_size(256 * 2**20) == "256M" and format_size(100) == "100"
    with pytest.raises(ValueError):
        parse_size("lots")


def test_expected_rates_per_class() -> None:
    h200 = node(2, LinkType.NVLINK)
    assert expected_p2p_gbps(h200.links[0], h200.gpus[0]) == H200_NVLINK_P2P_GBS
    mi = node(2, LinkType.XGMI, "AMD Instinct MI300X")
    assert expected_p2p_gbps(mi.links[0], mi.gpus[0]) == XGMI_GBS_PER_LINK == 48.0
    assert expected_p2p_gbps(node(2, LinkType.PCIE).links[0]) is None


def test_run_probe_pairs_groups_and_bus_bandwidth() -> None:
    dist = FakeDist({})
    res = run_probe(dist, node(4, LinkType.NVLINK), [0, 1, 2, 3], [2**20, GIB], workers={"llama": (0, 1)}, iters=3)
    assert len(res.copies) == 12 and {(c.src, c.dst) for c in res.copies} == {
        (a, b) for a in range(4) for b in range(4) if a != b
    }
    assert all(c.size_bytes == GIB and c.gbps == pytest.approx(380.0) for c in res.copies)
    assert dist.groups == [(0, 1), (0, 1, 2, 3)]
    big = [r for r in res.allreduce if r.size_bytes == GIB]
    assert [(r.group, r.gpus) for r in big] == [("llama", (0, 1)), ("all", (0, 1, 2, 3))]
    assert all(r.busbw_gbps == pytest.approx(350.0) for r in big)
    assert big[1].algbw_gbps == pytest.approx(350.0 / 1.5)
    assert res.flags == () and res.runner == "fake"


def test_one_gpu_probe_copies_locally_and_has_zero_busbw() -> None:
    assert copy_pairs([3]) == [(3, 3)]
    res = run_probe(FakeDist({}, default=2100.0), node(1, LinkType.NVLINK), [0], [GIB])
    assert [(c.src, c.dst) for c in res.copies] == [(0, 0)]
    assert res.allreduce[0].busbw_gbps == 0.0 and res.allreduce[0].algbw_gbps > 0
    assert res.pair_gbps(0, 0) == pytest.approx(2100.0) and res.flags == ()


def test_probe_groups_drop_duplicates_and_foreign_gpus() -> None:
    assert probe_groups([0, 1], {"a": (0, 1), "b": (2, 3)}) == [("a", (0, 1))]


def test_one_slow_pair_is_flagged_against_class_and_best() -> None:
    # 1->2 is slow in one direction: the pair is judged by its slower direction
    res = run_probe(FakeDist({(1, 2): 150.0}), node(4, LinkType.NVLINK), [0, 1, 2, 3], [GIB])
    assert res.pair_gbps(1, 2) == pytest.approx(150.0) and res.pair_gbps(2, 1) == pytest.approx(150.0)
    assert [(f.kind.value, f.gpus) for f in res.flags] == [("link_degraded", (1, 2))]
    msg = res.flags[0].message
    assert "NVLINK expectation 385" in msg and "best NVLINK pair (380" in msg


def test_uniformly_slow_class_is_flagged_by_class_only() -> None:
    res = run_probe(FakeDist({}, default=200.0), node(3, LinkType.NVLINK), [0, 1, 2], [GIB])
    assert len(res.flags) == 3 and all("expectation" in f.message and "best" not in f.message for f in res.flags)


def test_pcie_has_no_class_model_but_peers_judge() -> None:
    ok = run_probe(FakeDist({}, default=20.0), node(3, LinkType.PCIE), [0, 1, 2], [GIB])
    assert ok.flags == ()
    bad = run_probe(FakeDist({(0, 2): 9.0}, default=20.0), node(3, LinkType.PCIE), [0, 1, 2], [GIB])
    assert [f.gpus for f in bad.flags] == [(0, 2)]


def test_flag_thresholds_are_configurable() -> None:
    from amdtop.probe.flags import degraded_links

    res = run_probe(FakeDist({(0, 1): 300.0}), node(2, LinkType.NVLINK), [0, 1], [GIB])
    topo = node(2, LinkType.NVLINK)
    assert degraded_links(res, topo) == []  # 300 of 385 is 78%: above the default 60%
    assert len(degraded_links(res, topo, class_fraction=0.9)) == 1


def test_cache_round_trip_and_bad_files(tmp_path: Path) -> None:
    assert load_results(tmp_path) is None
    res = run_probe(FakeDist({(0, 1): 100.0}), node(2, LinkType.NVLINK), [0, 1], [2**20, GIB], workers={"w": (0, 1)})
    save_results(tmp_path / "state", res)
    back = load_results(tmp_path / "state")
    assert back is not None and results_json(back) == results_json(res)
    assert back.pair_gbps(0, 1) == pytest.approx(100.0) and back.flags[0].kind.value == "link_degraded"
    cache_path(tmp_path).write_text("{not json")
    assert load_results(tmp_path) is None
    cache_path(tmp_path).write_text(json.dumps({"gpus": [0]}))
    assert load_results(tmp_path) is None


def test_real_h200_probe_output_loads() -> None:
    doc = json.loads((FIXTURES / "h200_1gpu_amdtop.json").read_text())
    res = results_from_json(doc)
    assert res.gpus == (0,) and res.copies[0] == CopyResult(0, 0, GIB, res.copies[0].seconds)
    assert 1500 < res.copies[0].gbps < 2500  # device-local copy on H200: ~2.1 TB/s one way
    assert {r.busbw_gbps for r in res.allreduce} == {0.0}


def snap_with(processes: tuple[GpuProcess, ...]) -> NodeSnapshot:
    topo = node(2, LinkType.NVLINK)
    return NodeSnapshot("nvml", "h", 0.0, topo, (GpuSample(0, processes=processes), GpuSample(1)))


def test_busy_gpus_from_processes_and_workers() -> None:
    snap = snap_with((GpuProcess(4242, "python3", 10), GpuProcess(99, "amdtop", 1)))
    assert busy_gpus(snap, {}, [0, 1], own_pid=99) == ["GPU 0: pid 4242 python3"]
    w = WorkerStatus("llama", WorkerState.READY, (1,))
    assert busy_gpus(snap_with(()), {"llama": w}, [0, 1], own_pid=1) == ["GPU 1: worker llama"]
    assert busy_gpus(snap_with(()), {}, [0, 1], own_pid=1) == []


def test_cli_bad_input_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["probe", "--demo", "--sizes", "big"]) == 2
    assert main(["probe", "--demo", "--gpus", "12"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[0].startswith("amdtop: error: --sizes:") and err[1].startswith("amdtop: error: --gpus: GPU 12")


def test_cli_without_torch_is_one_clear_line(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "torch", None)  # import torch -> ImportError
    assert main(["probe", "--demo", "--gpus", "0-1", "--state-dir", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "PyTorch is not installed" in err and "amdtop[probe]" in err
    assert not cache_path(tmp_path).exists()
