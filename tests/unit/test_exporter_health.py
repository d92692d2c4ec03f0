"""Fabric, throttle and ECC families: device-metrics-exporter names for the raw counters, amdtop_ for derived rates."""

from __future__ import annotations

import dataclasses

from prometheus_client.core import Metric

from amdtop.exporter.families import build_families
from amdtop.health.throttle import throttle_shares
from amdtop.health.traffic import fabric_traffic
from amdtop.pipeline import NodeFrame
from amdtop.telemetry.sim import GpuDemand, SimBackend


def _by_name(fams: list[Metric]) -> dict[str, Metric]:
    return {f.name: f for f in fams}


def _values(fam: Metric) -> dict[tuple[str, ...], float]:
    return {tuple(s.labels[k] for k in sorted(s.labels)): s.value for s in fam.samples}


def test_fabric_throttle_ecc_families() -> None:
    t = [0.0]
    sim = SimBackend(clock=lambda: t[0])
    sim.set_demand("tp2", {0: GpuDemand(1.0, 1 << 30), 1: GpuDemand(1.0, 1 << 30)})
    sim.throttle(1, "hbm_thermal", 0.25)
    snaps = []
    for _ in range(3):
        snaps.append(sim.sample())
        t[0] += 5.0
    sim.add_ecc_errors(0, "umc", uncorrectable=2, correctable=5)
    snaps.append(sim.sample())
    state = NodeFrame(
        snapshot=snaps[-1], fabric=fabric_traffic(snaps[-3], snaps[-2]), throttle=tuple(throttle_shares(snaps, 10.0))
    )
    fams = _by_name(build_families(state))
    rx = [s for s in fams["gpu_xgmi_link_rx"].samples if s.labels["gpu_id"] == "0"]
    assert len(rx) == 7 and {s.labels["peer_bdf"] for s in rx} == {g.bdf for g in snaps[-1].topology.gpus[1:]}
    to1 = next(s for s in rx if s.labels["peer_bdf"] == snaps[-1].topology.gpus[1].bdf)
    assert to1.value == 40e9 * 15.0 / 1000  # KB read from GPU 1 over 15 s at 40 GB/s
    traffic = {
        (s.labels["gpu_a"], s.labels["gpu_b"], s.labels["direction"]): s.value
        for s in fams["amdtop_fabric_traffic_bytes_per_second"].samples
    }
    assert traffic[("0", "1", "write")] == 40e9 and traffic[("0", "2", "write")] == 0.0
    ratio = {(s.labels["gpu_id"], s.labels["reason"]): s.value for s in fams["amdtop_gpu_throttle_ratio"].samples}
    assert ratio[("1", "hbm_thermal")] == 0.25 and ratio[("0", "hbm_thermal")] == 0.0
    active = {(s.labels["gpu_id"], s.labels["reason"]) for s in fams["amdtop_gpu_throttle_active"].samples}
    assert active == {("1", "hbm_thermal")}
    hbm = {s.labels["gpu_id"]: s.value for s in fams["gpu_violation_hbm_thermal_residency_accumulated"].samples}
    assert hbm["1"] == 0.25 * 15_000 and hbm["0"] == 0.0
    assert {s.labels["gpu_id"]: s.value for s in fams["gpu_ecc_uncorrect_total"].samples}["0"] == 2
    assert {s.labels["gpu_id"]: s.value for s in fams["gpu_ecc_correct_total"].samples}["0"] == 5


def test_nvml_counts_are_not_published_as_amd_residency() -> None:
    sim = SimBackend(clock=lambda: 1.0)
    snap = dataclasses.replace(sim.sample(), backend="nvml")
    fams = _by_name(build_families(NodeFrame(snapshot=snap)))
    assert "gpu_violation_ppt_residency_accumulated" not in fams
    assert "gpu_ecc_uncorrect_total" in fams


def test_no_source_data_no_family() -> None:
    sim = SimBackend(scenario="pcie-4", clock=lambda: 1.0)
    fams = _by_name(build_families(NodeFrame(snapshot=sim.sample())))
    assert "gpu_xgmi_link_rx" not in fams and "amdtop_fabric_traffic_bytes_per_second" not in fams
