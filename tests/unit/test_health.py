"""Throttle shares and flags, ECC flags and fabric traffic from snapshot histories with known counters."""

from __future__ import annotations

from amdtop.health.counters import counter_delta, window
from amdtop.health.ecc import ecc_flags
from amdtop.health.throttle import throttle_flags, throttle_shares
from amdtop.health.traffic import fabric_traffic, group_traffic
from amdtop.model import EccCount, FlagKind, GpuSample, NodeSnapshot, XgmiLinkCounters
from amdtop.telemetry.sim import MI300X_BDFS, SimBackend

TOPO = SimBackend().topology()


def snap(t: float, samples: list[GpuSample]) -> NodeSnapshot:
    return NodeSnapshot("test", "h", t, TOPO, tuple(samples))


def test_counter_delta_wrap_and_reset() -> None:
    assert counter_delta(10, 25) == 15
    assert counter_delta(2**32 - 100, 50) == 150  # a u32 accumulator wrapped
    assert counter_delta(5_000, 10) is None  # a reset, not a wrap
    assert counter_delta(2**40, 10) is None  # a u64 never wraps in practice: a decrease is a reset


def test_window_keeps_a_baseline() -> None:
    hist = [snap(t, []) for t in (0.0, 3.0, 6.0, 9.0, 12.0)]
    assert [s.timestamp for s in window(hist, 10.0)] == [0.0, 3.0, 6.0, 9.0, 12.0]
    assert [s.timestamp for s in window(hist, 5.0)] == [6.0, 9.0, 12.0]


def _thr(i: int, clock: float, ppt: float, hbm: float = 0.0) -> GpuSample:
    return GpuSample(i, throttle_acc=(("power_cap", ppt), ("hbm_thermal", hbm)), throttle_clock=clock)


def test_throttle_share_from_counters_and_flag_text() -> None:
    # 1 ms ticks: over 10 s the clock advances 10000; power-cap residency 3800 -> 38 %.
    hist = [
        snap(100.0, [_thr(0, 1000, 500), _thr(3, 1000, 0)]),
        snap(105.0, [_thr(0, 6000, 2000), _thr(3, 6000, 0)]),
        snap(110.0, [_thr(0, 11000, 4300), _thr(3, 11000, 100)]),
    ]
    shares = {s.gpu: s for s in throttle_shares(hist, 10.0)}
    assert shares[0].source == "counters"
    assert dict(shares[0].shares)["power_cap"] == 0.38
    assert dict(shares[3].shares)["power_cap"] == 0.01
    flags = throttle_flags(hist, 10.0, 0.2)
    assert [(f.kind, f.gpus, f.message) for f in flags] == [
        (FlagKind.GPU_THROTTLED, (0,), "GPU 0 power-capped 38 % of the last 10 s")
    ]
    assert dict(flags[0].extra)["reason"] == "power_cap"


def test_throttle_counters_that_wrap_or_reset() -> None:
    top = 2**32 - 1000
    hist = [
        snap(0.0, [_thr(0, top, top - 500)]),
        snap(5.0, [_thr(0, top + 5000 - 2**32, top + 2000 - 2**32)]),  # both wrapped: 2500/5000
        snap(10.0, [_thr(0, 100, 0)]),  # driver reload: interval skipped, not a negative share
    ]
    (share,) = throttle_shares(hist, 10.0)
    assert dict(share.shares)["power_cap"] == 0.5


def test_throttle_share_from_active_reasons() -> None:
    hist = [snap(float(t), [GpuSample(1, throttle_active=("power_cap",) if t in (2, 3) else ())]) for t in range(6)]
    hist[-1] = snap(5.0, [GpuSample(1, throttle_active=("idle",))])
    (share,) = throttle_shares(hist, 10.0)
    assert share.source == "polls" and dict(share.shares) == {"power_cap": 0.4, "idle": 0.2}
    assert [f.message for f in throttle_flags(hist, 10.0, 0.3)] == ["GPU 1 power-capped 40 % of the last 5 s"]
    assert throttle_flags(hist, 10.0, 0.5) == []


def test_no_throttle_data_no_flag() -> None:
    hist = [snap(0.0, [GpuSample(0, util_pct=50.0)]), snap(1.0, [GpuSample(0, util_pct=50.0)])]
    assert throttle_shares(hist) == [] and throttle_flags(hist) == []


def _ecc(i: int, ue: int | None, ce: int = 0) -> GpuSample:
    return GpuSample(i, ecc=(EccCount("umc", ce, ue), EccCount("gfx", 0, 0)))


def test_ecc_flag_on_rise_only() -> None:
    steady = [snap(float(t), [_ecc(0, 2), _ecc(1, 0)]) for t in range(3)]
    assert ecc_flags(steady) == []
    rising = [*steady, snap(3.0, [_ecc(0, 2, ce=9), _ecc(1, 3)])]
    (flag,) = ecc_flags(rising)
    assert flag.kind is FlagKind.ECC_UNCORRECTABLE and flag.gpus == (1,)
    assert flag.message == "GPU 1: new uncorrectable ECC errors: 3 in umc (total 3)"
    # A reset (count goes down) is a new baseline; the flag stays up for the window after a rise, then clears.
    assert ecc_flags([*rising, snap(4.0, [_ecc(0, 0), _ecc(1, 3)])], 60.0)[0].gpus == (1,)
    later = [*rising, snap(100.0, [_ecc(0, 2), _ecc(1, 3)]), snap(170.0, [_ecc(0, 2), _ecc(1, 3)])]
    assert ecc_flags(later, 60.0) == []
    assert ecc_flags([snap(0.0, [GpuSample(0)]), snap(1.0, [GpuSample(0)])]) == []


def _links(i: int, peers: dict[int, tuple[int, int]], unknown: tuple[int, int] | None = None) -> GpuSample:
    counters = [XgmiLinkCounters(k, MI300X_BDFS[p], r, w) for k, (p, (r, w)) in enumerate(sorted(peers.items()))]
    if unknown is not None:
        counters.append(XgmiLinkCounters(7, None, *unknown))
    return GpuSample(i, xgmi_links=tuple(counters))


def test_fabric_traffic_pairs_gpus_and_groups() -> None:
    old = snap(10.0, [_links(0, {1: (0, 0), 2: (0, 0)}, (0, 0)), _links(1, {0: (0, 0)})])
    new = snap(12.0, [_links(0, {1: (4_000, 2_000), 2: (0, 10)}, (100, 0)), _links(1, {0: (2_000, 4_000)})])
    t = fabric_traffic(old, new)
    assert t is not None and t.interval_s == 2.0
    p01 = t.pair(0, 1)
    assert p01 is not None and (p01.read_bps, p01.write_bps) == (2_000_000.0, 1_000_000.0)  # KB/2 s
    g0 = t.gpu(0)
    assert g0 is not None and g0.read_bps == 2_050_000.0 and g0.write_bps == 1_005_000.0  # unknown peer counted
    g = group_traffic(t, (0, 1))
    assert g.intra_read_bps == 3_000_000.0 and g.intra_write_bps == 3_000_000.0
    assert g.total_read_bps == 3_050_000.0


def test_fabric_traffic_reset_and_missing() -> None:
    old = snap(0.0, [_links(0, {1: (5_000, 5_000)})])
    new = snap(1.0, [_links(0, {1: (10, 6_000)})])
    t = fabric_traffic(old, new)
    assert t is not None
    p = t.pair(0, 1)
    assert p is not None and p.read_bps is None and p.write_bps == 1_000_000.0
    assert fabric_traffic(old, old) is None  # no time passed
    assert fabric_traffic(snap(0.0, [GpuSample(0)]), snap(1.0, [GpuSample(0)])) is None


def test_json_shapes() -> None:
    import json

    from amdtop.health.report import fabric_json, gpu_health_json, health_flags
    from amdtop.health.throttle import ThrottleShare

    s = GpuSample(
        0,
        throttle_active=("power_cap",),
        ecc=(EccCount("umc", 1, 0),),
        xgmi_links=(XgmiLinkCounters(0, MI300X_BDFS[1], 10, 20),),
    )
    doc = gpu_health_json(s, ThrottleShare(0, 10.0, (("power_cap", 0.384),), "counters"))
    assert doc["throttle_pct"] == {"power_cap": 38.4} and doc["ecc"][0]["correctable"] == 1
    assert gpu_health_json(GpuSample(1)) == {
        "throttle_active": None,
        "throttle_pct": None,
        "throttle_window_s": None,
        "ecc": None,
        "xgmi_links": None,
    }
    old = snap(0.0, [_links(0, {1: (0, 0)})])
    new = snap(1.0, [_links(0, {1: (5, 5)})])
    json.dumps(fabric_json(fabric_traffic(old, new)))
    assert fabric_json(None) is None
    assert health_flags([old, new]) == []


def test_sliding_health_window_matches_the_reference_and_forgets_old_intervals() -> None:
    """The pipeline's memoised window gives, tick after tick, exactly what the stateless functions give, including
    across counter resets, a lost GPU and an ECC rise; intervals that left the window are dropped."""
    from amdtop.health.report import HealthWindow, health_flags

    def gpu(i: int, t: int) -> GpuSample:
        if i == 2 and t in (7, 8):
            return GpuSample(i, lost=True)
        clock = 1000.0 * t if t < 30 else 1000.0 * (t - 30)  # a driver reload at t=30 resets every counter
        ue = 1 if i == 1 and t >= 20 else 0
        return GpuSample(
            i,
            throttle_acc=(("power_cap", clock * (0.1 + 0.2 * i)), ("thermal", clock * 0.05 * (t % 3))),
            throttle_clock=clock,
            ecc=(EccCount("umc", min(t, 60) // 25, ue), EccCount("gfx", 0, 0)),  # ECC still for stretches: the skip path
        )

    health = HealthWindow()
    history: list[NodeSnapshot] = []
    for t in range(160):
        history.append(snap(float(t), [gpu(i, t) for i in range(4)]))
        recent = window(history, 60.0)
        shares, flags = health.judge(recent)
        assert shares == throttle_shares(recent)
        assert flags == health_flags(recent)
    assert any(f.kind is FlagKind.ECC_UNCORRECTABLE for f in health_flags(window(history[:40], 60.0)))
    # Only the intervals of the last window are kept (10 s of throttle steps + 60 s of ECC rises, for 4 GPUs).
    assert len(health._steps) <= 4 * 11 and len(health._rises) <= 4 * 61
