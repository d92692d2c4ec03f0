"""The simulated node's fabric traffic follows its TP workers' load; throttling and RAS errors can be injected."""

from __future__ import annotations

from amdtop.health.ecc import ecc_flags
from amdtop.health.throttle import throttle_flags
from amdtop.health.traffic import fabric_traffic, group_traffic
from amdtop.telemetry.sim import TP_XGMI_BYTES_PER_S, GpuDemand, SimBackend


def _sim() -> tuple[SimBackend, list[float]]:
    t = [1000.0]
    return SimBackend(seed=1, clock=lambda: t[0]), t


def test_traffic_follows_tp_load() -> None:
    sim, t = _sim()
    sim.set_demand("tp4", {i: GpuDemand(1.0, 10 << 30) for i in range(4)})
    sim.set_demand("tp2", {i: GpuDemand(0.5, 10 << 30) for i in (4, 5)})
    a = sim.sample()
    t[0] += 2.0
    b = sim.sample()
    traffic = fabric_traffic(a, b)
    assert traffic is not None
    per_peer = TP_XGMI_BYTES_PER_S / 3
    p = traffic.pair(0, 1)
    assert p is not None and p.write_bps is not None and p.read_bps is not None
    assert abs(p.write_bps - per_peer) / per_peer < 1e-3 and abs(p.read_bps - per_peer) / per_peer < 1e-3
    assert traffic.pair(0, 4) is not None and traffic.pair(0, 4).total_bps == 0.0  # type: ignore[union-attr]
    g4 = group_traffic(traffic, (0, 1, 2, 3))
    g2 = group_traffic(traffic, (4, 5))
    assert g4.intra_write_bps is not None and g2.intra_write_bps is not None
    assert abs(g4.intra_write_bps - 4 * TP_XGMI_BYTES_PER_S) / g4.intra_write_bps < 1e-3
    assert abs(g2.intra_write_bps - TP_XGMI_BYTES_PER_S) / g2.intra_write_bps < 1e-3  # two ranks at half load
    idle = group_traffic(traffic, (6, 7))
    assert idle.intra_write_bps == 0.0 and idle.total_read_bps == 0.0


def test_pcie_node_has_no_fabric_counters() -> None:
    sim = SimBackend(scenario="pcie-4", clock=lambda: 1.0)
    assert all(s.xgmi_links is None for s in sim.sample().gpus)


def test_injected_throttle_and_ecc() -> None:
    sim, t = _sim()
    sim.throttle(3, "power_cap", 0.38)
    snaps = []
    for _ in range(11):
        snaps.append(sim.sample())
        t[0] += 1.0
    flags = throttle_flags(snaps, 10.0)
    assert [f.message for f in flags] == ["GPU 3 power-capped 38 % of the last 10 s"]
    assert ecc_flags(snaps) == []
    sim.add_ecc_errors(6, "umc", uncorrectable=1)
    snaps.append(sim.sample())
    assert [f.gpus for f in ecc_flags(snaps)] == [(6,)]
